"""Bounded soak: mixed ask / search / upload traffic against a real gunicorn on 127.0.0.1 with a real
Celery worker on Redis, on a database of its own. Stops by itself.

    .venv/bin/python bench/soak.py [--duration 90] [--max-requests 3000] [--clients 3] [--json out.json]

Reports requests served, errors, p50/p99 per kind, p99 drift (first vs last fifth of the run) and
memory growth (RSS of the gunicorn master + workers and of the Celery worker, after warm-up vs at
the end), and whether every uploaded document's ingestion job finished. Loopback only; the database
(soak_<pid>) is dropped and every process it started is stopped by pid at the end. Uses the hash
embedder and the offline answer provider, so it measures the service, not a model.
"""

from __future__ import annotations

import argparse
import contextlib
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
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tenants.conf.environment import get_str  # noqa: E402  (after the checkout is on sys.path)

REDIS_URL = get_str("GROUNDED_SOAK_REDIS_URL")
EVAL_CORPUS = ROOT.parent / "shared" / "eval" / "corpus.jsonl"
QUESTIONS = ["What is the hotel limit per night?", "How many days of annual leave do employees get?",
             "Who approves business class flights?", "What does the expense policy say about meals?",
             "When must receipts be submitted?", "Which leave applies to personal days added to a business trip?"]
POLICY = ["Hotel stays are reimbursed up to EUR 180 per night in capital cities and EUR 140 elsewhere.",
          "Employees receive 25 days of annual leave per calendar year.",
          "Business class needs director approval; economy class is required for flights under six hours.",
          "Meals are reimbursed up to EUR 40 per day with receipts.",
          "Receipts must be submitted within 30 days of the trip.",
          "Personal days added to a business trip are taken as annual leave."]


@dataclass
class Sample:
    t: float
    kind: str
    ms: float
    status: int
    error: str = ""


@dataclass
class Stats:
    samples: list[Sample] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, s: Sample) -> None:
        with self.lock:
            self.samples.append(s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def rss_mb(pid: int) -> float:
    """RSS of a process and all its children, in MiB (0 if gone)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total / 2**20


# --- Setup: database, seed data, processes ----------------------------------------------------------

def setup_database(db_name: str, n_docs: int) -> dict:
    """Create and migrate the soak database, seed one tenant, return keys and ids."""
    os.environ["GROUNDED_DB_NAME"] = db_name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
    os.environ["GROUNDED_EMBEDDER"] = "hash"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{db_name}"')
    call_command("migrate", database="owner", verbosity=0)

    from kb.ingest import run_ingest_job, upload_document
    from kb.models import Corpus
    from tenants.models import ApiKey, Tenant
    from tenants.scope import Scope, activate

    tenant = Tenant.objects.create(name="Soak Ltd", slug="soak", settings={"daily_runs": 0})
    scope = Scope(tenant_id=tenant.id, all_departments=True, role="admin", principal="soak")
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Handbook", embedding_model="hash", embedding_dim=64)
        uploads = Corpus.objects.create(tenant=tenant, name="Uploads", embedding_model="hash", embedding_dim=64)
    texts = [f"# Policy {i}\n\n" + " ".join(POLICY[i % len(POLICY):] + POLICY[: i % len(POLICY)]) for i in range(6)]
    if EVAL_CORPUS.exists():
        with EVAL_CORPUS.open() as f:
            for _, line in zip(range(n_docs), f, strict=False):
                article = json.loads(line)
                texts.append(f"# {article['title']}\n\n{article['text'][:6000]}")
    for i, body in enumerate(texts):
        _, job = upload_document(scope=scope, corpus=corpus, filename=f"seed-{i}.md", data=body.encode())
        if job is not None:
            run_ingest_job(job_id=job.id, tenant_id=tenant.id)
    _, raw = ApiKey.issue(tenant=tenant, name="soak", role="admin", all_departments=True)
    connections.close_all()
    return {"key": raw, "tenant_id": tenant.id, "corpus": corpus.id, "uploads": uploads.id, "seed_docs": len(texts)}


def drop_database(db_name: str) -> None:
    from django.db import connections

    connections.close_all()
    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')


def start_processes(db_name: str, port: int, queue: str, logdir: Path, web_workers: int) -> tuple[subprocess.Popen, subprocess.Popen]:
    env = {k: v for k, v in os.environ.items() if k not in {"GEMINI_API_KEY", "OPENAI_COMPAT_BASE_URL"}}
    env.update({"GROUNDED_DB_NAME": db_name, "REDIS_URL": REDIS_URL, "CELERY_QUEUE": queue, "GROUNDED_EMBEDDER": "hash",
                "RATE_LIMIT_PER_MINUTE": "1000000", "DEBUG": "0", "SECRET_KEY": "soak-" + uuid.uuid4().hex,
                "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "api.project.settings"})
    bin_dir = Path(sys.executable).parent
    web_log = open(logdir / "gunicorn.log", "wb")  # noqa: SIM115 - closed when the process is stopped
    web = subprocess.Popen([str(bin_dir / "gunicorn"), "api.project.wsgi:application", "-b", f"127.0.0.1:{port}", "-w", str(web_workers),
                            "-k", "gthread", "--threads", "4", "--timeout", "120", "--graceful-timeout", "10"],
                           cwd=ROOT, env=env, stdout=web_log, stderr=subprocess.STDOUT, start_new_session=True)
    worker_log = open(logdir / "worker.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "api.project", "worker", "--pool=solo", "-Q", queue, "-l", "warning",
                               "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{queue}@%h"],
                              cwd=ROOT, env=env, stdout=worker_log, stderr=subprocess.STDOUT, start_new_session=True)
    return web, worker


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_ready(base: str, web: subprocess.Popen, timeout: float = 90) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if web.poll() is not None:
            raise RuntimeError("gunicorn exited during start-up")
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("gunicorn did not become ready")


# --- Traffic -----------------------------------------------------------------------------------------

def client_loop(base: str, seed: dict, stats: Stats, stop_at: float, budget: list[int], budget_lock: threading.Lock,
                rng: random.Random, uploaded: list[int], t0: float) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {seed['key']}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        while time.monotonic() < stop_at:
            with budget_lock:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            roll = rng.random()
            started = time.monotonic()
            kind, status, error = "search", 0, ""
            try:
                if roll < 0.3:
                    kind = "ask"
                    r = http.post("/api/v1/ask/", json={"question": rng.choice(QUESTIONS), "strategy": rng.choice(["classic", "auto"])})
                elif roll < 0.9:
                    mode = rng.choice(["hybrid", "keyword"])
                    r = http.post("/api/v1/search/", json={"query": rng.choice(QUESTIONS), "k": 8, "mode": mode})
                else:
                    kind = "upload"
                    n = rng.randrange(10**9)
                    body = f"# Note {n}\n\n" + " ".join(rng.sample(POLICY, 3)) + f" Reference {n}."
                    r = http.post("/api/v1/documents/", data={"corpus": str(seed["uploads"])},
                                  files={"files": (f"note-{n}.md", body.encode())})
                    if r.status_code == 201:
                        with budget_lock:
                            uploaded.extend(d["id"] for d in r.json()["documents"])
                status = r.status_code
                if status >= 400:
                    error = r.text[:200]
            except Exception as exc:  # a dropped connection or timeout is an error of the service
                error = f"{type(exc).__name__}: {exc}"[:200]
            stats.add(Sample(t=started - t0, kind=kind, ms=(time.monotonic() - started) * 1000, status=status, error=error))


def upload_jobs(base: str, seed: dict, ids: list[int]) -> dict:
    import httpx

    done = failed = pending = 0
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {seed['key']}"}, timeout=30) as http:
        for doc_id in ids:
            r = http.get(f"/api/v1/documents/{doc_id}/")
            status = r.json().get("status") if r.status_code == 200 else "missing"
            done += status == "ready"
            failed += status in {"failed", "missing"}
            pending += status in {"pending", "processing"}
    return {"uploaded": len(ids), "ready": done, "failed": failed, "pending": pending}


def summarise(samples: list[Sample], duration: float) -> dict:
    ok = [s for s in samples if s.status and s.status < 400]
    errors = [s for s in samples if not s.status or s.status >= 400]
    fifth = duration / 5
    first = [s.ms for s in ok if s.t < fifth]
    last = [s.ms for s in ok if s.t >= duration - fifth]
    by_kind = {}
    for kind in ("search", "ask", "upload"):
        ms = [s.ms for s in ok if s.kind == kind]
        by_kind[kind] = {"n": len(ms), "p50_ms": round(pct(ms, 50), 1), "p99_ms": round(pct(ms, 99), 1)}
    return {
        "requests": len(samples), "served_ok": len(ok), "errors": len(errors),
        "error_examples": sorted({f"{s.kind} {s.status} {s.error[:120]}" for s in errors})[:5],
        "throughput_rps": round(len(samples) / duration, 2) if duration else 0,
        "by_kind": by_kind,
        "p99_first_window_ms": round(pct(first, 99), 1), "p99_last_window_ms": round(pct(last, 99), 1),
        "p99_drift_ms": round(pct(last, 99) - pct(first, 99), 1),
        "p50_all_ms": round(statistics.median([s.ms for s in ok]), 1) if ok else 0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=90.0, help="seconds of traffic (bounded)")
    ap.add_argument("--max-requests", type=int, default=3000)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--web-workers", type=int, default=2)
    ap.add_argument("--seed-docs", type=int, default=20, help="eval-corpus articles to seed (if the shared data is present)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--logdir", type=Path, default=ROOT / ".data" / "soak")
    args = ap.parse_args(argv)
    args.duration = min(args.duration, 1800.0)  # bounded whatever is asked

    import redis

    redis.Redis.from_url(REDIS_URL).ping()
    args.logdir.mkdir(parents=True, exist_ok=True)
    db_name, queue, port = f"soak_{os.getpid()}", f"grounded-soak-{uuid.uuid4().hex[:8]}", free_port()
    base = f"http://127.0.0.1:{port}"
    seed = setup_database(db_name, args.seed_docs)
    web = worker = None
    try:
        web, worker = start_processes(db_name, port, queue, args.logdir, args.web_workers)
        wait_ready(base, web)
        stats, uploaded = Stats(), []
        budget, lock = [args.max_requests], threading.Lock()
        # Warm-up traffic is not counted; memory is measured from its end.
        warm_end = time.monotonic() + args.warmup
        warm = [threading.Thread(target=client_loop, args=(base, seed, Stats(), warm_end, [10**9], threading.Lock(),
                                                           random.Random(100 + i), [], time.monotonic())) for i in range(args.clients)]
        for t in warm:
            t.start()
        for t in warm:
            t.join()
        rss_start = {"web": rss_mb(web.pid), "worker": rss_mb(worker.pid)}
        t0 = time.monotonic()
        stop_at = t0 + args.duration
        threads = [threading.Thread(target=client_loop, args=(base, seed, stats, stop_at, budget, lock, random.Random(i), uploaded, t0))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        peak = dict(rss_start)
        while any(t.is_alive() for t in threads):
            time.sleep(1.0)
            peak = {"web": max(peak["web"], rss_mb(web.pid)), "worker": max(peak["worker"], rss_mb(worker.pid))}
        elapsed = time.monotonic() - t0
        rss_end = {"web": rss_mb(web.pid), "worker": rss_mb(worker.pid)}
        deadline = time.monotonic() + 90
        jobs = upload_jobs(base, seed, uploaded)
        while jobs["pending"] and time.monotonic() < deadline:
            time.sleep(2)
            jobs = upload_jobs(base, seed, uploaded)
        report = summarise(stats.samples, elapsed)
        report.update({
            "duration_s": round(elapsed, 1), "clients": args.clients, "web_workers": args.web_workers, "seed_docs": seed["seed_docs"],
            "rss_mb_start": {k: round(v, 1) for k, v in rss_start.items()}, "rss_mb_end": {k: round(v, 1) for k, v in rss_end.items()},
            "rss_mb_peak": {k: round(v, 1) for k, v in peak.items()},
            "rss_growth_mb": {k: round(rss_end[k] - rss_start[k], 1) for k in rss_start},
            "rss_growth_pct": {k: round(100 * (rss_end[k] - rss_start[k]) / rss_start[k], 1) if rss_start[k] else 0.0 for k in rss_start},
            "upload_jobs": jobs, "server_alive": web.poll() is None, "worker_alive": worker.poll() is None,
        })
    finally:
        for proc in (web, worker):
            if proc is not None:
                stop(proc)
        redis.Redis.from_url(REDIS_URL).delete(queue, "unacked", "unacked_index")
        drop_database(db_name)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if report["errors"] == 0 and not report["upload_jobs"]["pending"] else 1


if __name__ == "__main__":
    sys.exit(main())
