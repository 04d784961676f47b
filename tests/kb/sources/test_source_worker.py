"""A sync in a real Celery worker (Redis, its own queue) killed with SIGKILL mid-sync: the next sync,
in a new worker, completes it with every chunk exactly once and each chunk text embedded once."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kb.models import Chunk, Corpus, Document, SourceItem, SourceSync
from kb.sources.services import source_create
from kb.sources.sync import request_sync
from tenants.scope import activate
from tests.factories import make_tenant, whole_tenant
from tests.fakes import embedders as fake_embedders
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.test_ingest_worker import broker, start_worker, wait_for  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(databases=["default", "owner"], transaction=True)]

PAGES = 16


@pytest.fixture
def slow_site():
    """/ links to PAGES pages; each page takes 0.4 s to answer."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path == "/":
                body = "".join(f'<a href="/p/{i}">page {i}</a> ' for i in range(PAGES))
            elif self.path.startswith("/p/"):
                time.sleep(0.4)
                i = self.path.rsplit("/", 1)[1]
                body = f"<h1>Page {i}</h1>" + "".join(f"<p>Page {i} rule {j}: answer {int(i) * 10 + j}.</p>" for j in range(3))
            else:
                self.send_response(404)
                self.end_headers()
                return
            data = f"<!doctype html><html><body>{body}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_worker_killed_mid_sync_next_sync_completes_with_chunks_exactly_once(broker, start_worker, slow_site, settings):  # noqa: F811
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    env = {"SOURCES_ALLOW_PRIVATE_HOSTS": "1", "GROUNDED_INGEST_GROUP": "2"}
    first = start_worker(**env)
    tenant = make_tenant("Acme")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Intranet", embedding_model="hash-counting", embedding_dim=64)
    source = source_create(scope=scope, corpus=corpus, name="Intranet", kind="website", config={"start_url": slow_site})
    killed, _ = request_sync(scope=scope, source=source)

    def some_items() -> bool:
        with activate(scope):
            return SourceItem.objects.for_scope(scope).filter(source=source).count() >= 4
    wait_for(some_items, 60, "the sync to commit some items", first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    with activate(scope):
        assert SourceSync.objects.for_scope(scope).get(pk=killed.pk).status == "running"
        assert SourceItem.objects.for_scope(scope).filter(source=source).count() < PAGES + 1

    second = start_worker(**env)
    sync, created = request_sync(scope=scope, source=source)
    assert created and sync.pk != killed.pk

    def finished() -> bool:
        with activate(scope):
            done = SourceSync.objects.for_scope(scope).get(pk=sync.pk).status == "done"
            ready = Document.objects.for_scope(scope).filter(corpus=corpus, status="ready").count()
        return done and ready == PAGES + 1
    wait_for(finished, 120, "the next sync and its ingest jobs", second)

    with activate(scope):
        assert SourceSync.objects.for_scope(scope).get(pk=killed.pk).status == "interrupted"
        done = SourceSync.objects.for_scope(scope).get(pk=sync.pk)
        docs = list(Document.objects.for_scope(scope).filter(corpus=corpus))
        rows = list(Chunk.objects.for_scope(scope).filter(corpus=corpus).values_list("document_id", "ordinal", "text"))
        corpus = Corpus.objects.for_scope(scope).get(pk=corpus.pk)
    assert done.added + done.unchanged == PAGES + 1 and done.unchanged >= 3 and done.failed == 0
    assert len(docs) == PAGES + 1 and {d.version for d in docs} == {1}
    keys = [(d, o) for d, o, _ in rows]
    assert len(keys) == len(set(keys)) == sum(d.chunk_count for d in docs) == corpus.chunk_count
    counts = fake_embedders.embed_counts()
    texts = {hashlib.sha256(t.encode()).hexdigest() for _, _, t in rows}
    assert {h: counts.get(h, 0) for h in texts} == dict.fromkeys(texts, 1)  # each chunk text embedded exactly once
