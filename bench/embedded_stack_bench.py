"""The default run's shape (issue 31): embedded PostgreSQL + embedded Redis + a Celery worker + gunicorn.

    .venv/bin/python bench/embedded_stack_bench.py [--docs 20] [--searches 100] [--uploads 3]

In a scratch database on the embedded PostgreSQL, seeds a corpus of news articles with the local
MiniLM model (../shared/eval; a generated corpus without it), then, against gunicorn (2 workers,
as scripts/run) with a worker on a private embedded Redis:

1. cold start: from the moment /healthz first answers 200, `--searches` hybrid searches over the
   API one after the other, each on a new connection (either web worker may take it), after
   `--rounds` starts with the warm-up on (the default) and one with it off (GROUNDED_WARMUP=0).
   Prints the first, the second, the median and the last latency of each start, and the median
   first / median last over the warm starts (target: <= 2).
2. upload: `--uploads` markdown files of 78 KB through POST /api/v1/documents/ (target < 300 ms
   each), then the first one's job polled every 0.1 s through GET /api/v1/jobs/{id}/: the distinct
   progress values seen and the time until the document is ready.

Figures are printed, never asserted (a timing depends on the machine and its load, printed too).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB_NAME = "grounded_bench_stack"
EVAL = ROOT.parent / "shared" / "eval"
BIN = Path(sys.executable).parent


def articles(limit: int, offset: int = 0) -> list[dict]:
    path = EVAL / "corpus.jsonl"
    if path.exists():
        with path.open() as f:
            rows = [json.loads(line) for _, line in zip(range(offset + limit), f, strict=False)]
        return rows[offset:]
    rng = random.Random(offset)
    words = ("policy employee travel hotel expense manager approval receipt budget contract customer data security "
             "laptop office remote leave holiday salary training safety incident report audit vendor invoice").split()
    return [{"doc_id": f"gen-{offset + i}", "title": f"Generated article {offset + i}",
             "text": "\n\n".join(" ".join(rng.choice(words) for _ in range(60)).capitalize() + "." for _ in range(12))}
            for i in range(limit)]


def questions(n: int) -> list[str]:
    path = EVAL / "questions-dev.jsonl"
    if path.exists():
        with path.open() as f:
            found = [json.loads(line)["question"] for _, line in zip(range(n), f, strict=False)]
        if len(found) >= n:
            return found
    return [f"which expenses can be claimed for trip number {i}?" for i in range(n)]


def markdown_78k(offset: int) -> bytes:
    """About 78 KB of markdown (articles under headings), distinct per offset."""
    parts, size = [f"# Collected reports {offset}\n"], 0
    for a in articles(40, offset):
        parts.append(f"\n## {a['title']}\n\n{a['text']}\n")
        size += len(parts[-1].encode())
        if size >= 78 * 1024:
            break
    return "".join(parts).encode()[:78 * 1024]


def seed(docs: int) -> tuple[str, int]:
    """Scratch database with one corpus; returns an editor API key and the corpus id."""
    for var in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(var, None)
    os.environ.update(GROUNDED_DB_NAME=DB_NAME, GROUNDED_EMBEDDER="local", CELERY_TASK_ALWAYS_EAGER="1",
                      DJANGO_SETTINGS_MODULE="api.project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from kb.ingest import upload_document
    from kb.models import Corpus
    from tenants.models import ApiKey, Tenant
    from tenants.scope import Scope, activate

    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{DB_NAME}"')
    for alias in ("owner", "default"):
        connections[alias].close()
    call_command("migrate", database="owner", verbosity=0)
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    scope = Scope.system(tenant.id)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="news")
    started = time.perf_counter()
    for a in articles(docs):  # eager, in this process
        upload_document(scope=scope, corpus=corpus, filename=f"{a['doc_id']}.md", data=f"# {a['title']}\n\n{a['text']}".encode())
    with activate(scope):
        chunks = Corpus.objects.for_scope(scope).get(pk=corpus.pk).chunk_count
    print(f"seeded {docs} articles ({chunks} chunks) in {time.perf_counter() - started:.0f} s")
    _, raw = ApiKey.issue(tenant=tenant, name="bench", role="editor", all_departments=True)
    connections.close_all()
    return raw, corpus.pk


def drop_database() -> None:
    from django.db import connections

    connections.close_all()
    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(warm: bool, redis_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"}}
    env.update(GROUNDED_DB_NAME=DB_NAME, GROUNDED_EMBEDDER="local", GROUNDED_PROVIDER="offline", DEBUG="0",
               SECRET_KEY="bench-" + "k" * 60, ALLOWED_HOSTS="127.0.0.1", SECURE_COOKIES="0", RATE_LIMIT_PER_MINUTE="1000000",
               CELERY_TASK_ALWAYS_EAGER="0", GROUNDED_REDIS_DIR=redis_dir, GROUNDED_WARMUP="1" if warm else "0",
               LOG_LEVEL="ERROR", GUNICORN_ACCESS_LOG="/dev/null", GUNICORN_LOG_LEVEL="warning", WEB_CONCURRENCY="2",
               PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="api.project.settings", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    return env


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def request(port: int, method: str, path: str, key: str, body: bytes | None = None,
            content_type: str = "application/json") -> tuple[int, dict, float]:
    """One request on a new connection; (status, json, seconds)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Authorization": f"Bearer {key}", "Connection": "close"}
    if body is not None:
        headers["Content-Type"] = content_type
    t = time.perf_counter()
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - t
    conn.close()
    return response.status, (json.loads(data) if data else {}), elapsed


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 300) -> float:
    t = time.perf_counter()
    while time.perf_counter() - t < timeout:
        if proc.poll() is not None:
            raise SystemExit("gunicorn exited during start-up")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return time.perf_counter() - t
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("gunicorn did not become healthy")


def cold_start(key: str, warm: bool, searches: int, redis_dir: str, logdir: Path) -> dict:
    port = free_port()
    env = server_env(warm, redis_dir) | {"GUNICORN_BIND": f"127.0.0.1:{port}"}
    web = start([str(BIN / "gunicorn"), "-c", "python:api.project.gunicorn_conf", "api.project.wsgi:application"], env,
                logdir / f"web-{warm}.log")
    try:
        ready_s = wait_healthy(port, web)
        load = os.getloadavg()[0]
        times = []
        for q in questions(searches):
            status, body, elapsed = request(port, "POST", "/api/v1/search/", key, json.dumps({"query": q, "k": 10}).encode())
            if status != 200:
                raise SystemExit(f"search answered {status}: {body}")
            times.append(1000 * elapsed)
    finally:
        stop(web)
    return {"warm": warm, "ready_s": ready_s, "times": times, "load": load}


def uploads(key: str, corpus: int, n: int, docs_offset: int, redis_dir: str, logdir: Path) -> dict:
    """`n` distinct 78 KB files of articles from `docs_offset` on (not the seeded ones: no cache hits)."""
    port = free_port()
    env = server_env(True, redis_dir) | {"GUNICORN_BIND": f"127.0.0.1:{port}"}
    web = start([str(BIN / "gunicorn"), "-c", "python:api.project.gunicorn_conf", "api.project.wsgi:application"], env,
                logdir / "web-upload.log")
    try:
        wait_healthy(port, web)
        load = os.getloadavg()[0]
        posted, jobs = [], []
        for i in range(n):
            data = markdown_78k(docs_offset + 40 * i)
            boundary = uuid.uuid4().hex
            body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"corpus\"\r\n\r\n{corpus}\r\n"
                    f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"upload-{i}.md\"\r\n"
                    f"Content-Type: text/markdown\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
            status, reply, elapsed = request(port, "POST", "/api/v1/documents/", key, body,
                                             f"multipart/form-data; boundary={boundary}")
            if status != 202:
                raise SystemExit(f"upload answered {status}: {reply}")
            posted.append((len(data), 1000 * elapsed))
            jobs.append(reply["jobs"][0])
        t, samples = time.perf_counter(), []
        while time.perf_counter() - t < 600:
            _, job, _ = request(port, "GET", f"/api/v1/jobs/{jobs[0]}/", key)
            samples.append((time.perf_counter() - t, job["status"], job["chunks_done"], job["chunks_total"]))
            if job["status"] in ("done", "failed"):
                break
            time.sleep(0.1)
    finally:
        stop(web)
    return {"posted": posted, "samples": samples, "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=20)
    parser.add_argument("--searches", type=int, default=100)
    parser.add_argument("--uploads", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="starts with the warm-up on (one without it)")
    args = parser.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="grounded-stack-"))
    redis_dir = tempfile.mkdtemp(prefix="gr-redis-")
    os.environ["GROUNDED_REDIS_DIR"] = redis_dir
    key, corpus = seed(args.docs)
    from kb.embedded import redis_broker

    redis_broker.start(owner=os.getpid())
    worker = start([str(BIN / "celery"), "-A", "api.project", "worker", "--concurrency", "1", "-l", "info", "--without-gossip",
                    "--without-mingle", "-n", f"bench-{uuid.uuid4().hex[:6]}@%h"], server_env(True, redis_dir), logdir / "worker.log")
    try:
        deadline = time.monotonic() + 180  # ready, and its pool process warm, before anything is timed
        while b" ready." not in (logdir / "worker.log").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(5)
        runs = [[cold_start(key, warm, args.searches, redis_dir, logdir) for _ in range(args.rounds if warm else 1)]
                for warm in (True, False)]
        upload = uploads(key, corpus, args.uploads, args.docs, redis_dir, logdir)
    finally:
        stop(worker)
        redis_broker.stop()
        drop_database()
    print(f"\nEmbedded stack bench ({os.cpu_count()} cores; local MiniLM; gunicorn 2 workers + 1 Celery worker; logs in {logdir})")
    print("\n1. Searches right after /healthz first answers 200 (hybrid, k=10, a new connection each)\n")
    print(f"| warm-up, start | ready after | first | second | median | last (#{args.searches}) | first / last | "
          f"first / median | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in runs:
        for i, r in enumerate(mode):
            t = r["times"]
            print(f"| {'on' if r['warm'] else 'off (GROUNDED_WARMUP=0)'}, {i + 1} | {r['ready_s']:.1f} s | {t[0]:.0f} ms | "
                  f"{t[1]:.0f} ms | {statistics.median(t):.0f} ms | {t[-1]:.0f} ms | {t[0] / t[-1]:.1f}x | "
                  f"{t[0] / statistics.median(t):.1f}x | {r['load']:.1f} |")
    firsts = [r["times"][0] for r in runs[0]]
    lasts = [r["times"][-1] for r in runs[0]]
    print(f"\nwarm-up on, over {len(runs[0])} starts: median first {statistics.median(firsts):.0f} ms, median last "
          f"{statistics.median(lasts):.0f} ms: {statistics.median(firsts) / statistics.median(lasts):.1f}x (target <= 2)")
    print("\n2. Uploads of 78 KB markdown over the API (202 at once; then the first one's job, polled every 0.1 s)\n")
    print("| upload | bytes | POST answered in |")
    print("|---|---|---|")
    for i, (size, ms) in enumerate(upload["posted"]):
        print(f"| {i + 1} | {size:,} | {ms:.0f} ms |")
    samples = upload["samples"]
    seen = sorted({done for _, status, done, _ in samples if status == "running"})
    last = samples[-1]
    print(f"\nfirst upload's job: {last[1]} with {last[3]} chunks after {last[0]:.1f} s; progress values seen while "
          f"running: {seen}; load {upload['load']:.1f}")


if __name__ == "__main__":
    main()
