"""Where the fixed milliseconds of one scoped search go: round trips, server time, Python.

    .venv/bin/python bench/search_profile.py [--rows 20000] [--queries 200]

Loads clustered vectors as bench/retrieval_bench.py does (its own scratch database, dropped after),
then for a small scope (a small tenant's two departments) and a large one (the large tenant's one
department) prints, per query (median over `queries`):

- `search()` end to end (mode="vector", query vector given: no embedding);
- the statements it sent (round trips), captured with a Django execute wrapper, and each one's
  wall time as the client sees it;
- a bare round trip (`SELECT 1` through the same Django cursor) and the numpy floor over the scope.

The rest (end to end minus the statements' time) is Python in kb.retrieval. Nothing is written to
the repository.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")

from retrieval_bench import exact_topk, layout, on_clustered_database, vectors  # noqa: E402


class StatementLog:
    """A Django execute wrapper: the first words and wall time of every statement script sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def __call__(self, execute, sql, params, many, context):
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.calls.append((_label(sql), (time.perf_counter() - t) * 1000))


def _label(sql: str) -> str:
    if "EXECUTE" in sql:
        return "corpus check + ranking (prepared)" if "kb_corpus" in sql else "ranking (prepared)"
    for marker, label in (("kb_corpus", "resolve"), ("ts_stat", "term stats"), ("kb_chunk", "chunk statement")):
        if marker in sql:
            return label
    return sql[:40]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    on_clustered_database("bench_profile", args.rows, lambda d: run(args, d))


def run(args, d: dict) -> None:
    from django.db import connections

    from kb.retrieval import search
    from tenants.scope import Scope

    small, large = layout(args.rows)[-1][2], layout(args.rows)[0][2]
    cases = [(f"small tenant, 2 depts ({2 * small:,} rows)", 1, (0, 1)), (f"large tenant, 1 dept ({large:,} rows)", 0, (0,))]
    rng = np.random.default_rng(7)
    conn = connections["default"]
    print(f"load average {Path('/proc/loadavg').read_text().split()[:3]}\n")
    print("| scope | step | statements / search | median ms |")
    print("|---|---|---:|---:|")
    for label, ti, depts in cases:
        mask = (d["tenant"] == ti) & np.isin(d["dept"], depts)
        x, ids = np.ascontiguousarray(d["x"][mask]), d["ids"][mask]
        tenant = d["tenants"][ti]
        scope = Scope(tenant.id, department_ids=frozenset(d["depts"][ti][i].id for i in depts), role="reader",
                      principal="bench")
        queries = vectors("clustered", args.queries, rng, d["centers"])
        mk = d["model_key"]
        search(scope, "", k=10, mode="vector", query_vectors={mk: queries[0]})  # warm: connection, prepared plan
        total, floor, bare, steps = [], [], [], {}
        for q in queries:
            log = StatementLog()
            with conn.execute_wrapper(log):
                t = time.perf_counter()
                search(scope, "", k=10, mode="vector", query_vectors={mk: q})
                total.append((time.perf_counter() - t) * 1000)
            for name, ms in log.calls:
                steps.setdefault(name, []).append(ms)
            t = time.perf_counter()
            exact_topk(x, ids, q, 10)
            floor.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchall()
            bare.append((time.perf_counter() - t) * 1000)
        n = len(queries)
        sent = sum(statistics.median(v) * len(v) / n for v in steps.values())
        print(f"| {label} | search() end to end | {sum(len(v) for v in steps.values()) / n:.1f} | {statistics.median(total):.3f} |")
        for name, v in steps.items():
            print(f"| {label} | {name} | {len(v) / n:.1f} | {statistics.median(v):.3f} |")
        print(f"| {label} | Python (end to end - statements) | | {statistics.median(total) - sent:.3f} |")
        print(f"| {label} | bare round trip (SELECT 1) | | {statistics.median(bare):.3f} |")
        print(f"| {label} | numpy floor | | {statistics.median(floor):.3f} |")
        explain(conn, tenant.id, [dep.id for i, dep in enumerate(d["depts"][ti]) if i in depts], mk, queries[1])


def explain(conn, tenant_id: int, dept_ids: list[int], model_key: str, q: np.ndarray) -> None:
    """EXPLAIN ANALYZE of the exact ranking over the scope, under the scope's RLS tenant."""
    from django.db import transaction

    from kb.retrieval.prepare import vector_literal
    from tenants.db_wall import tenant_statements

    sql = ("EXPLAIN (ANALYZE, BUFFERS, SUMMARY) SELECT id, score FROM (SELECT c.id, (c.embedding::halfvec(384)) <=> "
           "%s::halfvec(384) AS score FROM kb_chunk c WHERE c.tenant_id = %s AND c.department_id = ANY(%s) "
           "AND c.embedding_model = %s OFFSET 0) e ORDER BY score LIMIT 10")
    with transaction.atomic(), conn.cursor() as cur:
        cur.execute(tenant_statements(tenant_id))
        for _ in range(3):
            cur.execute(sql, [vector_literal(q), tenant_id, dept_ids, model_key])
            plan = [re.sub(r"'\[[^']*\]'", "'[...]'", r[0]) for r in cur.fetchall()]
        print("\n    " + "\n    ".join(plan) + "\n")


if __name__ == "__main__":
    main()
