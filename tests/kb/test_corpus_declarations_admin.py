"""The admin declares a corpus's date key, facet keys and language as the API does: checked, and applied
to the stored documents and chunks (kb.ingest.corpora)."""

from __future__ import annotations

import pytest

from kb.models import Corpus, Document
from kb.retrieval import search
from tenants.scope import activate
from tests.factories import make_membership, make_staff_user, make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

# Staff users are made through the owner connection: their rows are committed.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


def form(corpus: Corpus, **changes) -> dict:
    data = {"name": corpus.name, "description": "", "chunk_target_tokens": 240, "chunk_overlap_tokens": 30,
            "date_key": corpus.date_key, "facet_keys": "[]", "language": corpus.language}
    return {**data, **changes}


def test_admin_declarations_are_checked_and_applied(client):
    from kb.ingest import run_ingest_job, upload_document

    tenant = make_tenant("Acme")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Politique", embedding_model="hash", embedding_dim=64)
    _, job = upload_document(scope=scope, corpus=corpus, filename="conge.md", title="Congé",
                             data="# Congé\n\nChaque salarié a droit à un congé annuel.\n".encode(),
                             metadata={"en_vigueur": "2024-09-01"})
    run_ingest_job(job_id=job.id, tenant_id=tenant.id)
    user = make_staff_user("admin-acme", "x" * 12)
    make_membership(user, tenant, "admin", all_departments=True)
    client.force_login(user)
    url = f"/admin/kb/corpus/{corpus.id}/change/"

    r = client.post(url, form(corpus, language="klingon", facet_keys='"theme"'))
    page = r.content.decode()
    assert r.status_code == 200 and "not a PostgreSQL text search configuration" in page and "list of metadata keys" in page

    r = client.post(url, form(corpus, language="french", date_key="en_vigueur", facet_keys='["theme"]'))
    assert r.status_code == 302, r.content.decode()[:2000]
    with activate(scope):
        saved = Corpus.objects.for_scope(scope).get(pk=corpus.pk)
        assert (saved.language, saved.date_key, saved.facet_keys) == ("french", "en_vigueur", ["theme"])
        assert Document.objects.for_scope(scope).get(corpus=corpus).dated_at.isoformat() == "2024-09-01T00:00:00+00:00"
    assert [h.corpus_id for h in search(scope, "annuelle", mode="keyword").hits] == [corpus.id]

    # A document's metadata edited in the admin: its date follows.
    with activate(scope):
        document = Document.objects.for_scope(scope).get(corpus=corpus)
    r = client.post(f"/admin/kb/document/{document.id}/change/", {"title": "Congé", "metadata": '{"en_vigueur": "2025-01-01"}'})
    assert r.status_code == 302, r.content.decode()[:2000]
    with activate(scope):
        assert Document.objects.for_scope(scope).get(pk=document.pk).dated_at.isoformat() == "2025-01-01T00:00:00+00:00"
