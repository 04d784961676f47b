"""The standard load test: Locust, headless, against gunicorn + a Celery worker on the embedded stack.

    .venv/bin/python bench/load_test.py [--docs 60] [--users 1 10 50] [--profiles search ask mixed]
                                        [--duration 30] [--cpu-requests 100] [--embedder local] [--keep] [--reuse]

What it runs, as `scripts/run` does: the embedded PostgreSQL (GROUNDED_DATA_DIR) and the embedded
Redis (broker, rate limits), a Celery worker, and gunicorn (api/project/gunicorn_conf.py: warm-up before the
first request, /healthz ready only after it) on 127.0.0.1, with the offline answer provider. Its own
scratch database (grounded_bench_locust): news articles from ../shared/eval/corpus.jsonl ingested
through kb.ingest, a tenant and a reader key. Questions: ../shared/eval/questions-dev.jsonl.

Then:
1. The mean server CPU time of one search: `--cpu-requests` sequential POST /api/v1/search/ (hybrid,
   k=10, one keep-alive connection), CPU time (user + system, children included) of every server
   process (gunicorn master and workers, the Celery worker, PostgreSQL's postmaster and backends,
   the embedded Redis) read before and after, divided by the request count. Capacity = cores /
   that mean: the requests per second the machine could serve if the server had every core.
2. Locust (bench/locustfile.py) headless for each profile and user count, every user spawned at
   once and the statistics reset when they are, `--duration` seconds each; `cat /proc/loadavg`
   read before and after each row.
3. The table, and the two ratios the issue asks for: search throughput at 10 users against 70 % of
   capacity, and search p99 at 10 users against 5x search p50 at 1 user.

Locust runs on the same 2 cores as the server (and so do other people's jobs on a shared machine):
the load average beside each row says how much of the machine the server had. Servers are
stopped by their pids, the embedded Redis with them; the database is dropped unless --keep.
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import load_bench  # noqa: E402  (bench/ is on sys.path: prepare() and the server environment)

DB_NAME = "grounded_bench_locust"
EVAL = ROOT.parent / "shared" / "eval"
PROFILES = {"search": "SearchUser", "ask": "AskUser", "mixed": "MixedUser"}


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def stack_env(embedder: str) -> dict[str, str]:
    """The servers' environment: load_bench's (offline provider, no debug, high rate limit) with the
    embedded broker and a real worker instead of eager jobs, rate limits counted in the embedded Redis."""
    from kb.embedded.redis_broker import broker_url, client_url

    env = load_bench.server_env(embedder)
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    env.update(GROUNDED_DB_NAME=DB_NAME, RATE_LIMIT_REDIS_URL=client_url(broker_url()))
    return env


def start_stack(env: dict[str, str], port: int, workers: int, threads: int) -> list[subprocess.Popen]:
    """A Celery worker and gunicorn, each in a session of its own; returns once /healthz answers 200."""
    worker = subprocess.Popen([str(ROOT / ".venv/bin/celery"), "-A", "api.project", "worker", "--concurrency", "1", "-l", "warning",
                               "--without-gossip", "--without-mingle", "-n", f"load-test-{os.getpid()}@%h"],
                              cwd=ROOT, env=env, start_new_session=True)
    web_env = env | {"GUNICORN_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": str(workers), "GUNICORN_THREADS": str(threads)}
    web = subprocess.Popen([str(ROOT / ".venv/bin/gunicorn"), "-c", "python:api.project.gunicorn_conf", "api.project.wsgi:application"],
                           cwd=ROOT, env=web_env, start_new_session=True)
    procs = [web, worker]
    if not load_bench.wait_healthy(port, procs, timeout_s=300):
        stop_stack(procs)
        raise SystemExit("gunicorn or the Celery worker exited during start-up, or /healthz was not 200 within 300 s")
    return procs


def stop_stack(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def server_roots(procs: list[subprocess.Popen]) -> dict[str, int]:
    """Pids whose process trees are the server, by part: gunicorn, the Celery worker, the postmaster, the embedded Redis."""
    from kb.embedded.postgres import data_dir
    from kb.embedded.redis_broker import server_pid

    roots = {"gunicorn": procs[0].pid, "celery": procs[1].pid}
    pid_file = Path(data_dir()) / "postmaster.pid"
    if pid_file.exists():
        roots["postgresql"] = int(pid_file.read_text().split()[0])
    redis_pid = server_pid()
    if redis_pid:
        roots["redis"] = redis_pid
    return roots


def cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """User + system CPU of each tree under `roots`: live processes, and the exited children each waited for."""
    out: dict[str, float] = {}
    for name, pid in roots.items():
        total = 0.0
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for proc in tree:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        out[name] = total
    return out


def wait_idle(roots: dict[str, int], timeout: float = 300.0) -> None:
    """Until the server uses under 5 % of a core over a second: every web worker done warming up
    (/healthz answers ready as soon as the worker answering it is), nothing left of the start-up."""
    deadline = time.time() + timeout
    before = sum(cpu_seconds(roots).values())
    while time.time() < deadline:
        time.sleep(1.0)
        now = sum(cpu_seconds(roots).values())
        if now - before < 0.05:
            return
        before = now
    print("warning: the server did not go idle before the CPU measurement", flush=True)


def search_cpu(port: int, key: str, questions: list[str], n: int, roots: dict[str, int]) -> tuple[dict[str, float], float]:
    """Mean server CPU seconds (by part) and mean wall seconds of one search, over `n` sequential requests."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def one(q: str) -> None:
        conn.request("POST", "/api/v1/search/", body=json.dumps({"query": q, "k": 10, "mode": "hybrid"}), headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise SystemExit(f"search answered {resp.status}")

    for q in questions[:10]:  # this connection's server thread warm
        one(q)
    wait_idle(roots)
    before, t = cpu_seconds(roots), time.perf_counter()
    for i in range(n):
        one(questions[(10 + i) % len(questions)])
    wall = time.perf_counter() - t
    after = cpu_seconds(roots)
    # What the server spends doing nothing (Celery polling, PostgreSQL's background processes) over
    # as long: measured right after, reported beside the figure (not subtracted).
    time.sleep(min(wall, 10.0))
    idle = sum(cpu_seconds(roots).values()) - sum(after.values())
    parts = {name: (after[name] - before[name]) / n for name in roots}
    parts["idle background (not in total)"] = idle / min(wall, 10.0) * wall / n
    return parts, wall / n


def run_locust(port: int, key: str, questions_file: str, profile: str, users: int, duration: int, out: Path) -> dict:
    """One headless Locust run; the Aggregated row of its CSV statistics."""
    prefix = out / f"{profile}_{users}"
    env = os.environ | {"LOAD_API_KEY": key, "LOAD_QUESTIONS": questions_file}
    cmd = [str(ROOT / ".venv/bin/locust"), "-f", str(ROOT / "bench/locustfile.py"), "--headless", "-u", str(users),
           "-r", str(users), "-t", f"{duration}s", "--reset-stats", "--only-summary", "--csv", str(prefix),
           "--host", f"http://127.0.0.1:{port}", "--loglevel", "ERROR", "--stop-timeout", "120", PROFILES[profile]]
    before = loadavg()
    subprocess.run(cmd, cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
    after = loadavg()
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = {r["Name"]: r for r in csv.DictReader(f)}
    agg = rows["Aggregated"]
    per_name = {name: r for name, r in rows.items() if name != "Aggregated"}
    return {"requests": int(agg["Request Count"]), "failures": int(agg["Failure Count"]), "rps": float(agg["Requests/s"]),
            "p50": float(agg["50%"]), "p95": float(agg["95%"]), "p99": float(agg["99%"]),
            "by_name": {n: (float(r["Requests/s"]), float(r["50%"]), float(r["99%"])) for n, r in per_name.items()},
            "load": f"{before} -> {after}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=60, help="articles to ingest from the eval corpus")
    ap.add_argument("--users", type=int, nargs="+", default=[1, 10, 50])
    ap.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    ap.add_argument("--duration", type=int, default=30, help="measured seconds per row")
    ap.add_argument("--cpu-requests", type=int, default=100, help="sequential searches for the CPU-time mean")
    ap.add_argument("--embedder", default="local", choices=["local", "hash"], help="query/ingest embedder (local = MiniLM)")
    ap.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    ap.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    ap.add_argument("--cpu-only", action="store_true", help="only the CPU time of a search (no Locust rows)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    ap.add_argument("--reuse", action="store_true", help="reuse a kept scratch database (skips ingestion)")
    args = ap.parse_args()

    for var in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(var, None)
    load_bench.DB_NAME = DB_NAME
    from kb.embedded import redis_broker as embedded_redis

    embedded_redis.stop_stale()
    embedded_redis.start(owner=os.getpid())
    procs: list[subprocess.Popen] = []
    rows = []
    try:
        key, questions = load_bench.prepare(args.docs, args.embedder, args.reuse)
        questions = [json.loads(line)["question"] for line in (EVAL / "questions-dev.jsonl").open()]
        port = load_bench.free_port()
        started = time.perf_counter()
        procs = start_stack(stack_env(args.embedder), port, args.workers, args.threads)
        print(f"stack healthy {time.perf_counter() - started:.1f} s after start (gunicorn {args.workers}x{args.threads} "
              f"+ Celery worker + embedded PostgreSQL and Redis)", flush=True)
        roots = server_roots(procs)
        cpu_load_before = loadavg()
        parts, wall = search_cpu(port, key, questions, args.cpu_requests, roots)
        cpu_load = f"{cpu_load_before} -> {loadavg()}"
        cpu = sum(v for name, v in parts.items() if not name.startswith("idle"))
        cores = os.cpu_count() or 1
        capacity = cores / cpu
        split = ", ".join(f"{name} {ms * 1000:.1f}" for name, ms in parts.items())
        print(f"search: {cpu * 1000:.1f} ms server CPU ({split}), {wall * 1000:.1f} ms wall per request over "
              f"{args.cpu_requests} sequential requests (load {cpu_load}); capacity {cores} cores / {cpu * 1000:.1f} ms = "
              f"{capacity:.1f} req/s", flush=True)
        if args.cpu_only:
            args.profiles = []
        with tempfile.TemporaryDirectory(prefix="locust_") as tmp:
            qfile = Path(tmp) / "questions.jsonl"
            qfile.write_text("".join(json.dumps({"question": q}) + "\n" for q in questions))
            for profile in args.profiles:
                for users in args.users:
                    r = run_locust(port, key, str(qfile), profile, users, args.duration, Path(tmp))
                    rows.append((profile, users, r))
                    print(f"  {profile:6} u={users:<3} {r['rps']:7.1f} req/s  p50 {r['p50']:7.0f}  p95 {r['p95']:7.0f}  "
                          f"p99 {r['p99']:7.0f} ms  failures {r['failures']}/{r['requests']}  load {r['load']}", flush=True)
    finally:
        stop_stack(procs)
        embedded_redis.stop()
        if not args.keep:
            from django.db import connections

            connections.close_all()
            with connections["owner"]._nodb_cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')

    print(f"\nLocust {_locust_version()} headless, closed loop (no think time), every user spawned at once, statistics "
          f"reset then, {args.duration} s per row; gunicorn gthread {args.workers}x{args.threads} + Celery worker on the "
          f"embedded PostgreSQL and Redis, 127.0.0.1; {args.embedder} embedder; offline answer provider; rate limit on; "
          f"{os.cpu_count()} cores shared by server, Locust and other jobs.\n")
    print("| profile | users | req/s | p50 ms | p95 ms | p99 ms | failures / requests | load average before -> after |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for profile, users, r in rows:
        print(f"| {profile} | {users} | {r['rps']:.1f} | {r['p50']:.0f} | {r['p95']:.0f} | {r['p99']:.0f} | "
              f"{r['failures']} / {r['requests']} | {r['load']} |")
    search = {users: r for profile, users, r in rows if profile == "search"}
    print(f"\nSearch server CPU per request {cpu * 1000:.1f} ms ({split}; mean of {args.cpu_requests} sequential; load {cpu_load}); "
          f"capacity {cores} / that = {capacity:.1f} req/s.")
    if 10 in search:
        share = search[10]["rps"] / capacity
        print(f"- search throughput at 10 users {search[10]['rps']:.1f} req/s = {share:.0%} of capacity "
              f"(target >= 70 %): {'met' if share >= 0.7 else 'NOT met'}")
    if 10 in search and 1 in search:
        ratio = search[10]["p99"] / max(search[1]["p50"], 1e-9)
        print(f"- search p99 at 10 users {search[10]['p99']:.0f} ms = {ratio:.1f}x p50 at 1 user ({search[1]['p50']:.0f} ms) "
              f"(target <= 5x): {'met' if ratio <= 5 else 'NOT met'}")
    failures = sum(r["failures"] for _, _, r in rows)
    print(f"- failures: {failures} of {sum(r['requests'] for _, _, r in rows)} requests")


def _locust_version() -> str:
    from importlib.metadata import version

    return version("locust")


if __name__ == "__main__":
    main()
