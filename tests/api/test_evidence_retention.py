"""A run's citations stay fully viewable after their document is re-uploaded with changes and after it
is deleted: the text as retrieved, its version, and that the document changed since (issue 29).
`manage.py purge_evidence` removes only what no run within retention references."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from agents.models import Evidence
from kb.ingest.documents import delete_document
from kb.models import Document
from tenants.scope import activate
from tests.api.conftest import ingest
from tests.factories import dept_scope, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])
QUESTION = "How much may employees spend on hotels per night?"


def _cited(world) -> tuple[dict, dict]:
    run = world.client("a-reader").post("/api/v1/ask/", {"question": QUESTION, "strategy": "classic"}, format="json").json()
    assert run["outcome"] == "answered" and run["citations"], run
    detail = world.client("a-auditor").get(f"/api/v1/runs/{run['id']}/").json()
    return run, detail["citations"][0]


def test_citations_stay_viewable_after_reupload_and_delete(world):
    run, before = _cited(world)
    assert before["evidence"]["text"] == before["chunk"]["text"] and before["evidence"]["document_version"] == 1
    assert not before["evidence"]["changed_since"] and before["evidence"]["document_now"] == "unchanged"
    ingest(world.shared, "Travel policy", "Employees may book hotels up to 210 EUR per night.")  # version 2: new chunks
    after = world.client("a-auditor").get(f"/api/v1/runs/{run['id']}/").json()["citations"][0]
    assert after["chunk"] is None  # the chunk the run cited is gone from search
    assert after["evidence"]["text"] == before["evidence"]["text"] and "150 EUR" in after["evidence"]["text"]
    assert after["evidence"]["document_version"] == 1 and after["evidence"]["document_now"] == "changed (now version 2)"
    assert after["evidence"]["changed_since"]
    scope = whole_tenant(world.a)
    with activate(scope):
        document = Document.objects.for_scope(scope).get(corpus=world.shared, title="Travel policy")
    delete_document(scope=scope, document=document)
    gone = world.client("a-auditor").get(f"/api/v1/runs/{run['id']}/").json()["citations"][0]
    assert gone["evidence"]["text"] == before["evidence"]["text"] and gone["evidence"]["document_now"] == "deleted"
    # and nowhere but audit: search no longer finds either version
    hits = world.client("a-reader").post("/api/v1/search/", {"query": "hotels per night EUR"}, format="json").json()["hits"]
    assert not any("150 EUR" in h["text"] or "210 EUR" in h["text"] for h in hits)


def test_evidence_is_visible_only_to_scopes_that_saw_its_department(world):
    run = world.client("a-admin").post("/api/v1/ask/", {"question": "What is the sales discount ceiling?", "strategy": "classic"},
                                       format="json").json()
    assert run["citations"], run
    with activate(whole_tenant(world.a)):
        assert Evidence.objects.for_scope(whole_tenant(world.a)).filter(department=world.sales).exists()
    eng = dept_scope(world.a, "Engineering", role="auditor")
    with activate(eng):
        assert not Evidence.objects.for_scope(eng).filter(department=world.sales).exists()
    with activate(whole_tenant(world.b)):
        assert not Evidence.objects.for_scope(whole_tenant(world.b)).exists()


def test_the_application_role_cannot_change_or_delete_evidence(world):
    from django.db import DatabaseError, connections, transaction

    _cited(world)
    for sql in ("UPDATE agents_evidence SET text = 'forged'", "DELETE FROM agents_evidence"):
        with (pytest.raises(DatabaseError), transaction.atomic(using="default"), activate(whole_tenant(world.a)),
              connections["default"].cursor() as cur):
            cur.execute(sql)


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_purge_respects_retention(world):
    import tests.kb._transactional  # noqa: F401 - flush through the owner after this transactional test

    _cited(world)
    scope = whole_tenant(world.a)
    with activate(scope):
        kept = Evidence.objects.for_scope(scope).count()
        document_id = Document.objects.for_scope(scope).get(corpus=world.shared, title="Travel policy").id
    assert kept
    out = io.StringIO()
    with pytest.raises(CommandError, match="refused"):
        call_command("purge_evidence", tenant=world.a.slug, document=document_id, stdout=out)
    assert "removed 0" in out.getvalue()
    world.a.settings = {**(world.a.settings or {}), "evidence_retention_days": 0}
    world.a.save(using="owner")
    call_command("purge_evidence", tenant=world.a.slug, stdout=(out := io.StringIO()))
    assert f"removed {kept}" in out.getvalue() and "kept 0" in out.getvalue(), out.getvalue()
