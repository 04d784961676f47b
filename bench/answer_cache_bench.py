"""A repeated question with and without the answer cache (agents.answer_cache): p50 and p90 of ask()'s wall time.

    REDIS_URL=redis://127.0.0.1:6379/5 .venv/bin/python bench/answer_cache_bench.py [--repeats 10] [--strategy classic]
        [--model-delay-ms 0,1000] [--keep-db]

Creates its own database (bench_cache_<pid>), loads the demo tenant (agents.demo: six policies through the real
ingestion, with the configured embedder), turns the answer cache on for it and asks each question `repeats`
times as Ada (Engineering) with the offline provider: first with `use_cache=False` (every run answers afresh),
then once to fill the cache and `repeats` times served from it. `--model-delay-ms` adds that wait to every
model call of the offline provider, standing in for a generative provider's latency (0: the offline provider
as it is, whose model calls take microseconds: the worst case for a cache). Both columns are ask() as the API calls it:
the daily-budget count, the run written with its steps and citations and chained. A hit also pays for its
key (the corpora's versions) and for re-reading the reused run and re-checking its cited chunks. Needs a Redis
(ANSWER_CACHE_REDIS_URL, by default RATE_LIMIT_REDIS_URL / REDIS_URL). Nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdb import create_database, drop_database  # noqa: E402  (bench/ is on sys.path when run as a script)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")  # ingestion runs here: no worker beside the bench

QUESTIONS = (
    "I'm extending a business trip to Lisbon with three personal days. Which travel expenses can I still claim, "
    "and which leave applies to the extra days?",
    "What is the hotel limit per night?",
    "How many days of annual leave do employees get?",
)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def provider(delay_ms: float):
    """The offline provider, each model call made `delay_ms` slower (a generative provider's wait)."""
    from agents.providers.offline import OfflineProvider

    class DelayedOffline(OfflineProvider):
        def generate(self, request):
            time.sleep(delay_ms / 1000)
            return super().generate(request)

    return DelayedOffline() if delay_ms else OfflineProvider()


def timed_asks(scope, question: str, strategy: str, repeats: int, use_cache: bool, delay_ms: float) -> tuple[list[float], list]:
    from agents.services import ask

    times, runs = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        runs.append(ask(scope=scope, question=question, strategy=strategy, provider=provider(delay_ms), use_cache=use_cache))
        times.append((time.perf_counter() - t) * 1000)
    return times, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--strategy", default="classic")
    parser.add_argument("--model-delay-ms", default="0,1000", help="comma-separated waits added to every model call")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    dbname = f"bench_cache_{os.getpid()}"
    create_database(dbname)
    try:
        from agents.demo import demo_scope, load_demo
        from tenants.conf import product_settings
        from tenants.scope import activate

        if not product_settings.ANSWER_CACHE_REDIS_URL:
            raise SystemExit("no Redis for the answer cache: set REDIS_URL (or ANSWER_CACHE_REDIS_URL)")
        tenant = load_demo(wait_seconds=600, log=lambda _: None)
        scope = demo_scope(tenant, "ada")
        tenant.settings = {**tenant.settings, "answer_cache_ttl_seconds": 3600, "daily_runs": 0}
        with activate(scope):
            tenant.save(update_fields=["settings"])
        rows = []
        for delay_ms in (float(d) for d in args.model_delay_ms.split(",")):
            for question in QUESTIONS:
                timed_asks(scope, question, args.strategy, 2, False, delay_ms)  # warm: models loaded, plans cached
                fresh, _ = timed_asks(scope, question, args.strategy, args.repeats, False, delay_ms)
                _, (filled,) = timed_asks(scope, question, args.strategy, 1, True, delay_ms)
                cached, runs = timed_asks(scope, question, args.strategy, args.repeats, True, delay_ms)
                hits = sum(r.cached_from_run_id == filled.pk for r in runs)
                rows.append((delay_ms, question, filled.outcome, hits, fresh, cached))
        print(f"\nanswer cache: {args.repeats} repeats per question, strategy {args.strategy}, offline provider "
              f"(ask() wall time, ms)\n")
        print("| model call wait | question | outcome | hits | p50 uncached | p50 cached | ratio | p90 uncached | p90 cached |")
        print("|---:|---|---|---|---:|---:|---:|---:|---:|")
        for delay_ms, question, outcome, hits, fresh, cached in rows:
            p50f, p50c = statistics.median(fresh), statistics.median(cached)
            short = question if len(question) <= 48 else question[:45] + "..."
            print(f"| {delay_ms:.0f} ms | {short} | {outcome} | {hits}/{len(cached)} | {p50f:.1f} | {p50c:.1f} | "
                  f"{p50f / p50c:.1f}x | {percentile(fresh, 0.9):.1f} | {percentile(cached, 0.9):.1f} |")
    finally:
        if not args.keep_db:
            drop_database(dbname)


if __name__ == "__main__":
    main()
