"""One sync per source at a time, for every kind: two requests join one sync, and of two workers
running syncs of one source at once, one runs and the other is refused."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from kb.models import Document, SourceSync
from kb.sources import sync as sync_module
from kb.sources.sync import request_sync, run_sync
from tenants.scope import activate
from tests.kb.sources.conftest import chunk_rows

pytestmark = pytest.mark.django_db

KINDS = ["folder", "s3", "website"]


def fill(upstream) -> None:
    for name in ("hr/leave", "finance/travel", "about"):
        upstream.put(name, f"# {name}\n\n" + "\n\n".join(f"The {name} rule {i}: file form {i} in {i + 2} days." for i in range(3)))


@pytest.mark.parametrize("upstream", KINDS, indirect=True)
def test_two_sync_requests_at_once_join_one_sync(world, upstream):
    fill(upstream)
    source = upstream.source(world["scope"], world["corpus"])
    scope = world["scope"]
    with activate(scope):  # no broker: the first request's sync would run after commit, so the second finds it queued
        a, created_a = request_sync(scope=scope, source=source)
        b, created_b = request_sync(scope=scope, source=source)
        assert SourceSync.objects.for_scope(scope).filter(source=source).count() == 1
    assert created_a and not created_b and a.pk == b.pk


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
@pytest.mark.parametrize("upstream", KINDS, indirect=True)
def test_two_workers_running_syncs_of_one_source_at_once_one_runs_the_other_is_refused(world, upstream, monkeypatch):
    from tests.kb import _transactional  # noqa: F401

    fill(upstream)
    scope = world["scope"]
    source = upstream.source(scope, world["corpus"])
    with activate(scope):
        syncs = [SourceSync.objects.create(tenant_id=scope.tenant_id, source=source, status="queued") for _ in range(2)]
    gate = threading.Event()
    slow = sync_module._Sync.run

    def held_run(self):
        gate.wait(10)
        return slow(self)

    monkeypatch.setattr(sync_module._Sync, "run", held_run)
    results = {}

    def worker(sync_id):
        try:
            results[sync_id] = run_sync(sync_id=sync_id, tenant_id=scope.tenant_id)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(s.pk,)) for s in syncs]
    threads[0].start()
    time.sleep(0.5)
    threads[1].start()
    threads[1].join(10)
    gate.set()
    threads[0].join(30)
    assert results == {syncs[0].pk: "done", syncs[1].pk: "busy"}
    with activate(scope):
        states = dict(SourceSync.objects.for_scope(scope).filter(source=source).values_list("pk", "status"))
        done = SourceSync.objects.for_scope(scope).get(pk=syncs[0].pk)
        refused = SourceSync.objects.for_scope(scope).get(pk=syncs[1].pk)
        docs = Document.objects.for_scope(scope).filter(corpus=world["corpus"]).count()
    assert states == {syncs[0].pk: "done", syncs[1].pk: "failed"}
    assert "another sync of this source was running" in refused.error and refused.added == 0
    assert done.added == docs == 3 + upstream.extra_documents
    rows = chunk_rows(scope, world["corpus"])
    assert len(rows) == len(set(rows)) > 0
