"""HTTP load on the real server: sustained requests/s and latency percentiles for `search` and `ask`.

    .venv/bin/python bench/load_bench.py [--docs 150] [--duration 15] [--concurrency 10 50] [--embedder local]

Builds a scratch database on the embedded PostgreSQL (news articles from ../shared/eval/corpus.jsonl,
ingested through kb.ingest), starts gunicorn with api/project/gunicorn_conf.py on 127.0.0.1 only, and drives
POST /api/v1/search/ and POST /api/v1/ask/ (offline provider) from N client threads, each with its
own keep-alive connection, for a bounded time per cell. Rate limiting stays on (Redis DB 4 when
reachable, with a limit high enough never to trigger) so its cost is in the figures. The server is
stopped (by its pid) and the scratch database dropped at the end.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB_NAME = "grounded_bench_load"
EVAL = ROOT.parent / "shared" / "eval"
RATE_REDIS = "redis://127.0.0.1:6379/4"


def _redis_up() -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(RATE_REDIS, socket_connect_timeout=1).ping())
    except Exception:
        return False


def server_env(embedder: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"}}
    env.update(GROUNDED_DB_NAME=DB_NAME, GROUNDED_EMBEDDER=embedder, GROUNDED_PROVIDER="offline", DEBUG="0",
               SECRET_KEY="bench-" + "k" * 60, ALLOWED_HOSTS="127.0.0.1", SECURE_COOKIES="0", RATE_LIMIT_PER_MINUTE="1000000",
               RATE_LIMIT_REDIS_URL=RATE_REDIS if _redis_up() else "", OMP_NUM_THREADS="1", LOG_LEVEL="ERROR",
               GUNICORN_ACCESS_LOG="/dev/null", DJANGO_SETTINGS_MODULE="api.project.settings", CELERY_TASK_ALWAYS_EAGER="1")
    return env


def prepare(docs: int, embedder: str, reuse: bool) -> tuple[str, list[str]]:
    """Create and fill the scratch database; returns a reader API key and the questions to ask."""
    os.environ.update({k: v for k, v in server_env(embedder).items() if k in {"GROUNDED_DB_NAME", "GROUNDED_EMBEDDER",
                                                                              "DJANGO_SETTINGS_MODULE", "OMP_NUM_THREADS",
                                                                              "CELERY_TASK_ALWAYS_EAGER"}})
    for var in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(var, None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from kb.ingest import upload_document
    from kb.models import Corpus
    from tenants.models import ApiKey, Tenant
    from tenants.scope import Scope, activate

    with connections["owner"]._nodb_cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME])
        exists = cur.fetchone() is not None
        if not (reuse and exists):
            cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{DB_NAME}"')
    for alias in ("owner", "default"):
        connections[alias].close()
    call_command("migrate", database="owner", verbosity=0)

    tenant = Tenant.objects.filter(slug="bench").first()
    if tenant is None:
        tenant = Tenant.objects.create(name="Bench", slug="bench")
        scope = Scope.system(tenant.id)
        with activate(scope):
            corpus = Corpus.objects.create(tenant=tenant, name="news")
        articles = [json.loads(line) for line in (EVAL / "corpus.jsonl").open()][:docs]
        started = time.perf_counter()
        for a in articles:  # eager mode: each upload is parsed, chunked, embedded and written before the next
            upload_document(scope=scope, corpus=corpus, filename=f"{a['doc_id']}.md",
                            data=f"# {a['title']}\n\n{a['text']}".encode(), title=a["title"],
                            metadata={"source": a.get("source", ""), "published_at": a.get("published_at", "")})
        print(f"ingested {len(articles)} articles in {time.perf_counter() - started:.0f} s ({embedder} embedder)")
    scope = Scope.system(tenant.id)
    with activate(scope):
        corpora = list(Corpus.objects.for_scope(scope).values_list("name", "chunk_count"))
    print(f"corpus: {corpora}")
    _, raw = ApiKey.issue(tenant=tenant, name="bench", role="reader", all_departments=True)
    questions = [json.loads(line)["question"] for line in (EVAL / "questions-dev.jsonl").open()][:300]
    connections.close_all()
    return raw, questions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, embedder: str, workers: int, threads: int) -> subprocess.Popen:
    env = server_env(embedder) | {"GUNICORN_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": str(workers),
                                  "GUNICORN_THREADS": str(threads)}
    proc = subprocess.Popen([str(ROOT / ".venv/bin/gunicorn"), "-c", "python:api.project.gunicorn_conf", "api.project.wsgi:application"],
                            cwd=ROOT, env=env, start_new_session=True)
    if not wait_healthy(port, [proc], timeout_s=60):
        stop_server(proc)
        raise SystemExit("gunicorn exited during start-up or did not become healthy within 60 s")
    return proc


def wait_healthy(port: int, procs: list[subprocess.Popen], timeout_s: float) -> bool:
    """True once GET /healthz on 127.0.0.1:`port` answers 200; False when one of `procs` exits or
    `timeout_s` passes first."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return True
        except OSError:
            pass
        if any(p.poll() is not None for p in procs):
            return False
        time.sleep(0.3)
    return False


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # our own session: gunicorn master and its workers
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def drive(port: int, key: str, path: str, bodies: list[dict], clients: int, duration: float, warmup: float) -> dict:
    """`clients` threads, each on one keep-alive connection, POSTing as fast as answers come back."""
    latencies: list[float] = []
    service: list[float] = []  # ask: the run's own latency_ms (agent loop + trace write), to split off HTTP/API time
    errors: dict[int | str, int] = {}
    lock = threading.Lock()
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration

    def client(seed: int) -> None:
        rng = random.Random(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        mine: list[float] = []
        my_service: list[float] = []
        my_errors: dict[int | str, int] = {}
        while (now := time.perf_counter()) < stop_at:
            body = json.dumps(rng.choice(bodies))
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException) as exc:
                status = type(exc).__name__
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            done = time.perf_counter()
            # Sustained throughput: every request that completes inside the window counts, whenever it started.
            if measure_from <= done <= stop_at:
                if status == 200:
                    mine.append(done - now)
                    if path.endswith("/ask/"):
                        my_service.append(float(json.loads(payload).get("latency_ms", 0.0)))
                else:
                    my_errors[status] = my_errors.get(status, 0) + 1
        with lock:
            latencies.extend(mine)
            service.extend(my_service)
            for k, v in my_errors.items():
                errors[k] = errors.get(k, 0) + v

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {"ok": len(lat), "rps": len(lat) / duration, "p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99),
            "mean": statistics.fmean(lat) * 1000 if lat else float("nan"), "errors": errors,
            "service_p50": statistics.median(service) if service else float("nan")}


def warm_up(port: int, key: str, questions: list[str], n: int) -> None:
    """Load the embedding model and open DB connections in every worker thread before measuring."""
    started = time.perf_counter()
    bodies = [{"query": q, "k": 10} for q in questions[:n]]
    for path in ("/api/v1/search/", "/api/v1/ask/"):
        threads = [threading.Thread(target=_post, args=(port, key, path, b if "search" in path else {"question": b["query"]}))
                   for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print(f"warm-up: {2 * len(bodies)} requests in {time.perf_counter() - started:.1f} s")


def _post(port: int, key: str, path: str, body: dict) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", path, body=json.dumps(body), headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    conn.close()
    return resp.status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=150, help="articles to ingest from the eval corpus")
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds per cell")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--embedder", default="local", choices=["local", "hash"], help="query/ingest embedder (local = MiniLM)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--reuse", action="store_true", help="reuse a kept scratch database (skips ingestion)")
    args = parser.parse_args()

    key, questions = prepare(args.docs, args.embedder, args.reuse)
    port = free_port()
    proc = start_server(port, args.embedder, args.workers, args.threads)
    rows = []
    try:
        warm_up(port, key, questions, args.workers * args.threads)
        cells = [("search", "/api/v1/search/", [{"query": q, "k": 10, "mode": "hybrid"} for q in questions]),
                 ("ask", "/api/v1/ask/", [{"question": q, "strategy": "auto"} for q in questions])]
        for name, path, bodies in cells:
            for clients in args.concurrency:
                r = drive(port, key, path, bodies, clients, args.duration, args.warmup)
                rows.append((name, clients, r))
                print(f"  {name:6} c={clients:<3} {r['rps']:7.1f} req/s  p50 {r['p50']:7.1f}  p95 {r['p95']:7.1f}  "
                      f"p99 {r['p99']:7.1f} ms  errors {r['errors'] or 0}", flush=True)
    finally:
        stop_server(proc)
        if not args.keep:
            from django.db import connections

            connections.close_all()
            with connections["owner"]._nodb_cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')

    print(f"\ngunicorn gthread, {args.workers} workers x {args.threads} threads, 127.0.0.1; {os.cpu_count()} cores shared "
          f"by server and client; {args.duration:.0f} s per cell after {args.warmup:.0f} s warm-up; {args.embedder} embedder; "
          f"offline answer provider; rate limit {'on (Redis)' if _redis_up() else 'on (cache)'}; "
          f"load average at the end {os.getloadavg()[0]:.1f} (other jobs share the machine)\n")
    print("| endpoint | clients | req/s | p50 ms | p95 ms | p99 ms | run latency p50 ms | non-200 |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, clients, r in rows:
        svc = "" if r["service_p50"] != r["service_p50"] else f"{r['service_p50']:.1f}"
        print(f"| {name} | {clients} | {r['rps']:.1f} | {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {svc} | {r['errors'] or 0} |")


if __name__ == "__main__":
    main()
