"""Ingestion through a real Celery worker subprocess on Redis, against the real (test) PostgreSQL.

The worker runs `celery -A api.project worker --pool=solo` on its own queue in Redis DB 2, with the test
embedders (tests.fakes.embedders) counting every embedded text in Redis across processes.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from api.project.celery import app as celery_app
from kb.chunking import chunk_document
from kb.embedding import HashEmbedder
from kb.ingest import resume_stuck_jobs, upload_document
from kb.models import Chunk, Corpus, Document, IngestJob
from kb.parsing import parse
from kb.tasks import ingest_document_task
from tenants.conf.environment import get_str
from tenants.scope import activate
from tests.celery_pools import reset_celery_pools
from tests.factories import make_tenant, whole_tenant
from tests.fakes import embedders as fake_embedders
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

REDIS_URL = get_str("GROUNDED_TEST_REDIS_URL")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.worker, pytest.mark.django_db(databases=["default", "owner"], transaction=True)]


def _redis() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


@pytest.fixture
def broker():
    """Point this process's Celery app at Redis (tasks leave the process) on a queue of its own."""
    try:
        _redis().ping()
    except redis.RedisError:
        pytest.skip(f"Redis not reachable at {REDIS_URL}")
    queue = f"grounded-test-{uuid.uuid4().hex[:10]}"
    keys = ("task_always_eager", "broker_url", "task_default_queue")
    saved = {k: celery_app.conf[k] for k in keys}
    # Fresh pools for this URL: an earlier test may have closed the cached ones (a closed pool refuses every send).
    celery_app.conf.update(task_always_eager=False, broker_url=REDIS_URL, task_default_queue=queue)
    reset_celery_pools()
    fake_embedders.reset_counts()
    yield queue
    celery_app.conf.update(saved)
    r = _redis()
    r.delete(queue, "unacked", "unacked_index", "unacked_mutex")


@pytest.fixture
def start_worker(broker, tmp_path):
    """start_worker(**env) -> Popen; every worker started is SIGKILLed/stopped at the end."""
    procs: list[subprocess.Popen] = []

    def start(**extra_env: str) -> subprocess.Popen:
        log = tmp_path / f"worker-{len(procs)}.log"
        env = {**os.environ, "REDIS_URL": REDIS_URL, "CELERY_QUEUE": broker, "GROUNDED_EMBEDDER": "hash",
               "GROUNDED_EMBEDDER_PLUGINS": "tests.fakes.embedders", "PYTHONPATH": str(ROOT),
               "GROUNDED_TEST_REDIS_URL": REDIS_URL, **extra_env}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "api.project", "worker", "--pool=solo", "-Q", broker, "-l", "info",
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{broker}-{len(procs)}@%h"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        deadline = time.monotonic() + 90
        while b" ready." not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        proc.log = log  # type: ignore[attr-defined]
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(condition: Callable[[], bool], timeout: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            log = proc.log.read_text()[-3000:] if proc is not None else ""
            raise AssertionError(f"timed out waiting for {what}\n{log}")
        time.sleep(0.1)


def drained(queue: str) -> bool:
    r = _redis()
    return r.llen(queue) == 0 and r.hlen("unacked") == 0


def sections(*bodies: str) -> bytes:
    return "\n\n".join(f"# Part {i}\n\n{body}" for i, body in enumerate(bodies)).encode()


def make_corpus(model: str, dim: int):
    tenant = make_tenant("Acme")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Handbook", embedding_model=model, embedding_dim=dim,
                                       chunk_target_tokens=40, chunk_overlap_tokens=0)
    return scope, corpus


def expected_texts(data: bytes, filename: str) -> list[str]:
    """What the pipeline must write: the chunker run locally with the same settings."""
    counter = HashEmbedder(64)
    return [s.text for s in chunk_document(parse(data, filename), target_tokens=40, overlap_tokens=0,
                                           max_tokens=counter.max_tokens, count_tokens=counter.count_tokens)]


def jobs_done(scope, ids) -> bool:
    with activate(scope):
        return IngestJob.objects.for_scope(scope).filter(pk__in=ids, status="done").count() == len(ids)


def test_worker_ingests_many_documents_embedding_each_chunk_once_even_when_delivered_twice(broker, start_worker):
    worker = start_worker()
    scope, corpus = make_corpus("hash-counting", 64)
    shared = "Shared clause: every employee must keep customer data confidential."
    files = {f"doc{i}.md": sections(shared, *[f"Document {i} rule {j}: do thing {i * 10 + j}." for j in range(6)])
             for i in range(5)}
    jobs = []
    for name, data in files.items():
        _, job = upload_document(scope=scope, corpus=corpus, filename=name, data=data)
        jobs.append(job)
    for job in jobs:  # the same message delivered a second time
        ingest_document_task.delay(job.pk, scope.tenant_id)
    wait_for(lambda: jobs_done(scope, [j.pk for j in jobs]), 90, "all jobs done", worker)
    wait_for(lambda: drained(broker), 30, "queue drained", worker)

    with activate(scope):
        docs = {d.source_name: d for d in Document.objects.for_scope(scope).filter(corpus=corpus)}
        rows = list(Chunk.objects.for_scope(scope).filter(corpus=corpus).values_list("document_id", "ordinal", "text", "embedding_model"))
        attempts = set(IngestJob.objects.for_scope(scope).filter(pk__in=[j.pk for j in jobs]).values_list("attempts", flat=True))
        corpus = Corpus.objects.for_scope(scope).get(pk=corpus.pk)
    assert attempts == {1}  # the duplicates found their job done and changed nothing
    assert len(rows) == len({(d, o) for d, o, _, _ in rows}) == corpus.chunk_count
    for name, data in files.items():
        doc = docs[name]
        assert doc.status == "ready"
        assert [t for d, o, t, _ in sorted(rows, key=lambda r: r[:2]) if d == doc.pk] == expected_texts(data, name)
    assert {m for *_, m in rows} == {"hash-counting:64"}
    counts = fake_embedders.embed_counts()
    distinct = {hashlib.sha256(t.encode()).hexdigest() for _, _, t, _ in rows}
    assert {h: counts.get(h, 0) for h in distinct} == dict.fromkeys(distinct, 1)  # every chunk text embedded exactly once
    assert set(counts) == distinct


def test_worker_killed_mid_job_is_resumed_by_the_reaper_without_duplicates_or_gaps(broker, start_worker):
    env = {"GROUNDED_EMBED_BATCH": "4", "GROUNDED_SLOW_EMBED_S": "0.25"}
    first = start_worker(**env)
    scope, corpus = make_corpus("hash-slow", 64)
    data = sections(*[f"Rule {i}: the answer to question {i} is {i * 7}." for i in range(40)])
    expected = expected_texts(data, "rules.md")
    assert len(expected) >= 30
    doc, job = upload_document(scope=scope, corpus=corpus, filename="rules.md", data=data)

    def progressed() -> bool:
        with activate(scope):
            return IngestJob.objects.for_scope(scope).get(pk=job.pk).chunks_done >= 8
    wait_for(progressed, 60, "the job to get going", first)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    with activate(scope):
        killed = IngestJob.objects.for_scope(scope).get(pk=job.pk)
        assert killed.status == "running" and 8 <= killed.chunks_done < len(expected)
        assert not Chunk.objects.for_scope(scope).filter(document=doc).exists()  # nothing half-written

    second = start_worker(**env)
    assert resume_stuck_jobs(older_than=0) == [job.pk]
    wait_for(lambda: jobs_done(scope, [job.pk]), 90, "the resumed job", second)

    with activate(scope):
        job = IngestJob.objects.for_scope(scope).get(pk=job.pk)
        texts = list(Chunk.objects.for_scope(scope).filter(document=doc).order_by("ordinal").values_list("text", flat=True))
        ordinals = list(Chunk.objects.for_scope(scope).filter(document=doc).order_by("ordinal").values_list("ordinal", flat=True))
        doc = Document.objects.for_scope(scope).get(pk=doc.pk)
    assert texts == expected and ordinals == list(range(len(expected)))
    assert (doc.status, doc.chunk_count, job.attempts, job.chunks_done) == ("ready", len(expected), 2, len(expected))
    counts = fake_embedders.embed_counts()
    # Finished batches were staged in the cache: at most the batch in flight at the kill is embedded again.
    assert all(counts.get(hashlib.sha256(t.encode()).hexdigest(), 0) >= 1 for t in expected)
    assert sum(counts.values()) - len(set(expected)) <= 4
