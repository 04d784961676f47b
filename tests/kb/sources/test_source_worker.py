"""A sync in a real Celery worker (Redis, its own queue) killed with SIGKILL mid-sync: the next sync,
in a new worker, completes it with every chunk exactly once and each chunk text embedded once. For
the kinds whose upstream a test can slow down (a website, an S3 server) so the kill lands mid-sync; a
folder's interrupted sync is in test_folder_source.py (the resuming code is the same for every kind)."""

from __future__ import annotations

import hashlib
import os
import signal

import pytest

from kb.models import Chunk, Corpus, Document, SourceItem, SourceSync
from kb.sources.sync import request_sync
from tenants.scope import activate
from tests.fakes import embedders as fake_embedders
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.test_ingest_worker import broker, start_worker, wait_for  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(databases=["default", "owner"], transaction=True)]

ITEMS = 16


@pytest.mark.parametrize("upstream", ["website", "s3"], indirect=True)
def test_worker_killed_mid_sync_next_sync_completes_with_chunks_exactly_once(broker, start_worker, world, upstream):  # noqa: F811
    for i in range(ITEMS):
        upstream.put(f"p/{i}", f"# Page {i}\n\n" + "\n\n".join(f"Page {i} rule {j}: answer {i * 10 + j}." for j in range(3)))
    upstream.slow_down(0.4)  # each item's download: a window to kill the worker between two committed batches
    total = ITEMS + upstream.extra_documents
    env = {"SOURCES_ALLOW_PRIVATE_HOSTS": "1", "GROUNDED_INGEST_GROUP": "2"}  # items commit two by two
    first = start_worker(**env)
    scope = world["scope"]
    with activate(scope):
        corpus = Corpus.objects.create(tenant=world["tenant"], name="Counted", embedding_model="hash-counting", embedding_dim=64)
    source = upstream.source(scope, corpus)
    killed, _ = request_sync(scope=scope, source=source)

    def some_items() -> bool:
        with activate(scope):
            return SourceItem.objects.for_scope(scope).filter(source=source).count() >= 4
    wait_for(some_items, 60, "the sync to commit some items", first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    with activate(scope):
        assert SourceSync.objects.for_scope(scope).get(pk=killed.pk).status == "running"
        assert SourceItem.objects.for_scope(scope).filter(source=source).count() < total

    upstream.slow_down(0)
    second = start_worker(**env)
    sync, created = request_sync(scope=scope, source=source)
    assert created and sync.pk != killed.pk

    def finished() -> bool:
        with activate(scope):
            done = SourceSync.objects.for_scope(scope).get(pk=sync.pk).status == "done"
            ready = Document.objects.for_scope(scope).filter(corpus=corpus, status="ready").count()
        return done and ready == total
    wait_for(finished, 120, "the next sync and its ingest jobs", second)

    with activate(scope):
        assert SourceSync.objects.for_scope(scope).get(pk=killed.pk).status == "interrupted"
        done = SourceSync.objects.for_scope(scope).get(pk=sync.pk)
        docs = list(Document.objects.for_scope(scope).filter(corpus=corpus))
        rows = list(Chunk.objects.for_scope(scope).filter(corpus=corpus).values_list("document_id", "ordinal", "text"))
        corpus = Corpus.objects.for_scope(scope).get(pk=corpus.pk)
    assert done.added + done.unchanged == total and done.unchanged >= 4 and done.failed == 0
    assert len(docs) == total and {d.version for d in docs} == {1}
    keys = [(d, o) for d, o, _ in rows]
    assert len(keys) == len(set(keys)) == sum(d.chunk_count for d in docs) == corpus.chunk_count
    assert all(f"Page {i} rule 2: answer {i * 10 + 2}." in " ".join(t for _, _, t in rows) for i in range(ITEMS))
    counts = fake_embedders.embed_counts()
    texts = {hashlib.sha256(t.encode()).hexdigest() for _, _, t in rows}
    assert {h: counts.get(h, 0) for h in texts} == dict.fromkeys(texts, 1)  # each chunk text embedded exactly once
