"""A run's citations stay fully viewable after their document is re-uploaded with changes and after it
is deleted: the text as retrieved, its version, and that the document changed since (issue 29).
`manage.py purge_evidence` removes only what no run within retention references."""

from __future__ import annotations

import io
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.models import Citation, Evidence, RunStep
from kb.ingest.documents import delete_document
from kb.models import Document
from tenants.scope import activate
from tests.api.conftest import ingest, issue
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
    assert gone["chunk"] is None and gone["evidence"]["text"] == before["evidence"]["text"]
    assert gone["evidence"]["document_version"] == 1 and gone["evidence"]["document_id"] == before["evidence"]["document_id"]
    assert gone["evidence"]["document_title"] == "Travel policy" and gone["evidence"]["locator"] == before["evidence"]["locator"]
    assert gone["evidence"]["document_now"] == "deleted" and gone["evidence"]["changed_since"]
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


@pytest.mark.tenantless_sql("adversarial: tenant-less UPDATE and DELETE of evidence are refused")
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


def _references(world, run_id: int) -> set[tuple[int, str]]:
    """The (chunk id, content hash) pairs run `run_id` retrieved or cited, as its record holds them."""
    scope = whole_tenant(world.a)
    with activate(scope):
        steps = RunStep.objects.for_scope(scope).filter(run_id=run_id)
        pairs = {pair for s in steps for pair in zip(s.chunk_ids, s.content_hashes, strict=True)}
        pairs |= set(Citation.objects.for_scope(scope).filter(run_id=run_id).values_list("chunk_id", "content_hash"))
    return pairs


def _evidence(tenant) -> dict[tuple[int, str], Evidence]:
    return {(e.chunk_id, e.content_hash): e for e in Evidence.objects.unscoped_dangerously("owner").filter(tenant=tenant)}


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_purge_removes_what_only_runs_past_retention_reference_and_refuses_the_rest(world, monkeypatch):
    """Retention 30 days. A run 60 days old (an admin: every department) retrieved the travel and the pricing policy;
    a run of today (an Engineering reader: never Sales) retrieved and cited the travel policy. The purge removes the
    pricing evidence, which only the old run references, and keeps (and, asked for that document, refuses to purge)
    the travel evidence: the old run saw it first, but a run within retention references it."""
    import tests.kb._transactional  # noqa: F401 - flush through the owner after this transactional test
    from agents import services

    world.a.settings = {**(world.a.settings or {}), "evidence_retention_days": 30}
    world.a.save(using="owner")
    long_ago = timezone.now() - timedelta(days=60)
    with monkeypatch.context() as m:
        m.setattr(services, "timezone", SimpleNamespace(now=lambda: long_ago))  # the runs' created_at, as if asked then
        old = world.client("a-admin").post("/api/v1/ask/", {"question": "What is the sales discount ceiling, and the hotel "
                                                            "limit per night?", "strategy": "classic"}, format="json").json()
        foreign = world.client("b-reader").post("/api/v1/ask/", {"question": "What is the Globex hotel limit per night?",
                                                                 "strategy": "classic"}, format="json").json()
    world.keys["a-eng-reader"] = issue(world.a, "reader", [world.eng])
    recent = world.client("a-eng-reader").post("/api/v1/ask/", {"question": QUESTION, "strategy": "classic"}, format="json").json()
    assert recent["outcome"] == "answered" and recent["citations"], recent
    scope = whole_tenant(world.a)
    with activate(scope):
        titles = dict(Document.objects.for_scope(scope).values_list("title", "id"))
    travel, pricing = titles["Travel policy"], titles["Pricing"]
    old_refs, recent_refs = _references(world, old["id"]), _references(world, recent["id"])
    held = _evidence(world.a)
    assert set(held) == old_refs | recent_refs  # every chunk either run retrieved is held, once
    by_document = {d: {k for k, e in held.items() if e.document_id == d} for d in (travel, pricing)}
    assert by_document[travel] and by_document[travel] <= old_refs & recent_refs  # seen 60 days ago, referenced today
    assert all(held[k].first_seen_at == long_ago for k in by_document[travel])  # kept on references, not on first sight
    assert by_document[pricing] and not by_document[pricing] & recent_refs  # only the old run references it
    foreign_held = set(_evidence(world.b))
    assert foreign_held and foreign["outcome"] == "answered"

    out = io.StringIO()
    with pytest.raises(CommandError, match=f"refused: {len(by_document[travel])} row"):
        call_command("purge_evidence", tenant=world.a.slug, document=travel, stdout=out)
    assert f"removed 0 evidence row(s); kept {len(by_document[travel])} " in out.getvalue(), out.getvalue()
    assert set(_evidence(world.a)) == set(held)
    call_command("purge_evidence", tenant=world.a.slug, document=pricing, stdout=(out := io.StringIO()))  # no refusal
    assert f"removed {len(by_document[pricing])} evidence row(s); kept 0 " in out.getvalue(), out.getvalue()
    assert set(_evidence(world.a)) == set(held) - by_document[pricing]
    call_command("purge_evidence", tenant=world.a.slug, stdout=(out := io.StringIO()))
    rest = set(held) - by_document[pricing] - recent_refs  # e.g. a chunk only the old run retrieved
    assert f"removed {len(rest)} evidence row(s); kept {len(recent_refs)} " in out.getvalue(), out.getvalue()
    assert "30-day retention period" in out.getvalue()
    assert set(_evidence(world.a)) == recent_refs and set(_evidence(world.b)) == foreign_held  # another tenant's untouched

    auditor = world.client("a-auditor")
    kept = auditor.get(f"/api/v1/runs/{recent['id']}/").json()["citations"]
    assert all(c["evidence"] and c["evidence"]["document_now"] == "unchanged" for c in kept), kept
    assert any("150 EUR" in c["evidence"]["text"] and c["evidence"]["document_version"] == 1 for c in kept), kept
    purged = auditor.get(f"/api/v1/runs/{old['id']}/").json()["citations"]
    assert {c["evidence"] is None for c in purged if c["document_id"] == pricing} == {True}, purged  # past retention: gone
