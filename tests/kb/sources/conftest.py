"""Fixtures for source tests: a tenant with departments, a tenant-wide corpus, folder roots allowed."""

from __future__ import annotations

import pytest

from kb.models import Chunk, Corpus, Document, SourceChange, SourceItem, SourceSync
from kb.sources.services import source_create
from kb.sources.sync import request_sync
from tenants.scope import activate
from tests.factories import department, make_tenant, whole_tenant


@pytest.fixture
def world(settings, tmp_path):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    tenant = make_tenant("Acme", departments=("HR", "Finance"))
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Handbook", chunk_target_tokens=60, chunk_overlap_tokens=0)
    return {"tenant": tenant, "scope": scope, "corpus": corpus, "hr": department(tenant, "HR"),
            "finance": department(tenant, "Finance"), "root": tmp_path}


@pytest.fixture
def sync_now(django_capture_on_commit_callbacks):
    """sync_now(scope, source): request a sync, run it (and its ingest jobs) in process as after a
    commit (no broker in tests), and return it finished."""

    def run(scope, source) -> SourceSync:
        with django_capture_on_commit_callbacks(execute=True):
            sync, _ = request_sync(scope=scope, source=source)
        with activate(scope):
            return SourceSync.objects.for_scope(scope).get(pk=sync.pk)

    return run


def corpus_state(scope, corpus) -> dict[str, tuple]:
    """source key -> (department id, status, chunk count, chunk departments) of every document."""
    with activate(scope):
        docs = list(Document.objects.for_scope(scope).filter(corpus=corpus))
        out = {}
        for d in docs:
            depts = set(Chunk.objects.for_scope(scope).filter(document=d).values_list("department_id", flat=True))
            out[d.source_name.split(":", 2)[2]] = (d.department_id, d.status, d.chunk_count, depts)
        return out


def chunk_rows(scope, corpus) -> list[tuple]:
    with activate(scope):
        return list(Chunk.objects.for_scope(scope).filter(corpus=corpus).values_list("document_id", "ordinal"))


def changes(scope, sync) -> list[tuple[str, str]]:
    with activate(scope):
        return sorted(SourceChange.objects.for_scope(scope).filter(sync_id=sync.pk).values_list("action", "key"))


def items(scope, source) -> dict[str, SourceItem]:
    with activate(scope):
        return {i.key: i for i in SourceItem.objects.for_scope(scope).filter(source=source)}


__all__ = ["changes", "chunk_rows", "corpus_state", "items", "source_create"]
