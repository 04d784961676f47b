"""S3 sources against a real S3 API server on loopback (moto in server mode), driven through boto3."""

from __future__ import annotations

import logging

import pytest

from kb.models import Document, Source, SourceSync
from kb.sources import sync as sync_module
from kb.sources.services import source_create, source_update
from kb.sources.sync import request_sync
from tenants.scope import NotAllowed, activate
from tests.kb.sources.conftest import S3_ACCESS_KEY, S3_SECRET_KEY, changes, chunk_rows, chunk_text, corpus_state, items, put

pytestmark = pytest.mark.django_db


def policy(title: str) -> str:
    return f"# {title}\n\n" + "\n\n".join(f"{title} rule {i}: keep receipt {i} for {i + 3} years." for i in range(3))


@pytest.fixture
def s3_source(world, bucket, s3_server):
    put(bucket, "handbook/hr/leave.md", policy("Leave"))
    put(bucket, "handbook/hr/sick.md", policy("Sick days"))
    put(bucket, "handbook/finance/travel.md", policy("Travel"))
    put(bucket, "other/not-mine.md", policy("Outside the prefix"))
    return source_create(scope=world["scope"], corpus=world["corpus"], name="Bucket", kind="s3",
                         config={"bucket": bucket[1], "prefix": "handbook/", "endpoint_url": s3_server},
                         credentials={"access_key_id": S3_ACCESS_KEY, "secret_access_key": S3_SECRET_KEY},
                         department_rules=[{"prefix": "hr/", "department": world["hr"].pk},
                                           {"prefix": "finance/", "department": world["finance"].pk}])


def test_credentials_are_stored_encrypted(world, s3_source):
    with activate(world["scope"]):
        row = Source.objects.for_scope(world["scope"]).get(pk=s3_source.pk)
    assert row.secret and S3_SECRET_KEY not in row.secret and S3_ACCESS_KEY not in row.secret
    assert S3_SECRET_KEY not in str(row.config)


def test_add_modify_delete_and_move_in_the_bucket_are_mirrored(world, bucket, s3_source, sync_now, caplog):
    scope = world["scope"]
    caplog.set_level(logging.DEBUG)
    first = sync_now(scope, s3_source)
    assert (first.status, first.added, first.complete_listing) == ("done", 3, True)
    hr, fin = world["hr"].pk, world["finance"].pk
    assert {k: v[0] for k, v in corpus_state(scope, world["corpus"]).items()} == {
        "hr/leave.md": hr, "hr/sick.md": hr, "finance/travel.md": fin}

    assert sync_now(scope, s3_source).unchanged == 3

    put(bucket, "handbook/hr/leave.md", policy("Leave") + "\n\nLeave rule 7: carry over five days.")
    put(bucket, "handbook/finance/budget.md", policy("Budget"))
    bucket[0].delete_object(Bucket=bucket[1], Key="handbook/hr/sick.md")
    bucket[0].copy_object(Bucket=bucket[1], Key="handbook/hr/travel.md",
                          CopySource={"Bucket": bucket[1], "Key": "handbook/finance/travel.md"})
    bucket[0].delete_object(Bucket=bucket[1], Key="handbook/finance/travel.md")
    third = sync_now(scope, s3_source)
    assert changes(scope, third) == [("added", "finance/budget.md"), ("changed", "hr/leave.md"), ("moved", "hr/travel.md"),
                                     ("removed", "hr/sick.md")]
    state = corpus_state(scope, world["corpus"])
    assert {k: (v[0], v[1], v[3]) for k, v in state.items()} == {
        "hr/leave.md": (hr, "ready", {hr}), "hr/travel.md": (hr, "ready", {hr}), "finance/budget.md": (fin, "ready", {fin})}
    text = chunk_text(scope, world["corpus"])
    assert "carry over five days" in text and "Sick days" not in text
    logged = caplog.text + repr([r.__dict__ for r in caplog.records])
    assert S3_SECRET_KEY not in logged


def test_a_corrupt_object_fails_alone(world, bucket, s3_source, sync_now):
    put(bucket, "handbook/hr/broken.docx", b"PK\x03\x04 not a real docx")
    put(bucket, "handbook/hr/binary.bin", b"\x00\x01\x02")
    sync = sync_now(world["scope"], s3_source)
    assert (sync.added, sync.failed) == (3, 2)
    it = items(world["scope"], s3_source)
    assert it["hr/broken.docx"].state == it["hr/binary.bin"].state == "failed"
    assert "unsupported" in it["hr/binary.bin"].error


def test_a_killed_sync_is_completed_by_the_next_with_chunks_exactly_once(world, bucket, s3_source, monkeypatch, sync_now,
                                                                         django_capture_on_commit_callbacks):
    for i in range(5):
        put(bucket, f"handbook/hr/extra{i}.md", policy(f"Extra {i}"))
    original = sync_module._Sync._ingest
    calls = {"n": 0}

    def dying(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise SystemExit("worker killed")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(sync_module._Sync, "_ingest", dying)
    monkeypatch.setattr(sync_module, "batch_items", lambda: 2)  # items commit two by two: the kill loses the open batch
    with pytest.raises(SystemExit), django_capture_on_commit_callbacks(execute=True):
        request_sync(scope=world["scope"], source=s3_source)
    monkeypatch.setattr(sync_module._Sync, "_ingest", original)
    sync = sync_now(world["scope"], s3_source)
    assert (sync.status, sync.added, sync.unchanged) == ("done", 6, 2)
    with activate(world["scope"]):
        docs = list(Document.objects.for_scope(world["scope"]).filter(corpus=world["corpus"]))
    rows = chunk_rows(world["scope"], world["corpus"])
    assert len(docs) == 8 and {d.status for d in docs} == {"ready"}
    assert len(rows) == len(set(rows)) == sum(d.chunk_count for d in docs)


def test_refused_credentials_fail_the_sync_without_echoing_them(world, bucket, s3_source, sync_now, s3_server):
    source_update(scope=world["scope"], source=s3_source, config={"bucket": "no-such-bucket", "endpoint_url": s3_server})
    sync = sync_now(world["scope"], s3_source)
    assert sync.status == "failed" and "NoSuchBucket" in sync.error and S3_SECRET_KEY not in sync.error
    with activate(world["scope"]):
        assert SourceSync.objects.for_scope(world["scope"]).filter(error__contains=S3_SECRET_KEY).count() == 0


def test_loopback_endpoints_are_refused_unless_allowed(world, s3_server, settings):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = False
    with pytest.raises(NotAllowed, match="private or local"):
        source_create(scope=world["scope"], corpus=world["corpus"], name="Internal", kind="s3",
                      config={"bucket": "x", "endpoint_url": s3_server})
