"""What the database wall adds to a search: the same searches under the old policy and under the wall.

    .venv/bin/python bench/db_wall.py [--rows 100000] [--queries 10] [--rounds 24]

Loads clustered vectors as bench/retrieval_bench.py does (its own scratch database on the configured
server, dropped after), then times `kb.retrieval.search` (the real path: the tenant's SET LOCAL statements,
corpus resolution, prepared ranking statements, hit rows) as the application role, for a small scope (a
small tenant's two departments), a larger one (the large tenant's one department) and the large tenant
whole (the HNSW path), vector and hybrid,
under three forms of every tenant policy, switched (ALTER POLICY, as the owner) between blocks of
searches on the same data and the same query vectors, in many short rounds whose order rotates so that
drift and the load of a shared machine hit every form alike:

- `legacy`: `tenant_id = NULLIF(current_setting('app.tenant_id', true), '')::bigint` (before the wall);
- `wall`: `tenant_id = (SELECT grounded_tenant())` (the proof checked by a SECURITY DEFINER function, as an
  InitPlan: once per statement and table reference; what tenants 0007 shipped);
- `wall, bare call`: `tenant_id = grounded_tenant()` (what Citus needs and what ships since tenants 0008,
  tenants.rls.TENANT_EXPR: the planner may call it once per row where a statement names no tenant).

Prints p50/p95 per case and form with the ratio to `legacy`, the paths the searches took (the same under
every form), and the scan nodes of each case's ranking statement under each form (EXPLAIN ANALYZE of the
very prepared statement the search ran), to show the tenant and HNSW indexes are still used. Nothing is
written to the repository.
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

from retrieval_bench import layout, on_clustered_database, percentiles, vectors  # noqa: E402

FORMS = {
    "legacy": "NULLIF(current_setting('app.tenant_id', true), '')::bigint",
    "wall": "(SELECT grounded_tenant())",
    "wall, bare call": "grounded_tenant()",
}
NEVER = "%no policy reads like this%"


def switch(current: str, wanted: str) -> None:
    """Rewrite every tenant policy from form `current` to form `wanted` (as the owner)."""
    from django.db import connections

    from tenants.rls import rewrite_policies_sql

    if current != wanted:
        with connections["owner"].cursor() as cur:
            cur.execute(rewrite_policies_sql(FORMS[current], FORMS[wanted], NEVER))


class Capture:
    """A Django execute wrapper keeping the statement scripts of one search."""

    def __init__(self) -> None:
        self.scripts: list[tuple[str, list]] = []

    def __call__(self, execute, sql, params, many, context):
        self.scripts.append((sql, list(params or [])))
        return execute(sql, params, many, context)


def explain_ranking(conn, scripts: list[tuple[str, list]]) -> list[str]:
    """The scan nodes of the ranking statements (EXECUTE kb_...) among `scripts`, re-run under EXPLAIN ANALYZE."""
    out: list[str] = []
    for sql, params in scripts:
        if "EXECUTE kb_" not in sql or "PREPARE kb_" in sql:
            continue
        with conn.cursor() as cur:
            cur.execute(sql.replace("EXECUTE kb_", "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE kb_"), params)
            raw = getattr(cur, "cursor", cur)
            while True:
                if raw.description is not None and raw.description[0].name == "QUERY PLAN":
                    for (line,) in raw.fetchall():
                        if re.search(r"Scan|InitPlan|Index Cond|Filter: .*tenant", line):
                            out.append(re.sub(r"'\[[^']*\]'", "'[...]'", line.rstrip())[:150])
                if not raw.nextset():
                    break
    return out


def statement_cost_us(expression: str, tenant_id: int, statements: int = 5000, repeats: int = 3) -> float:
    """Microseconds a statement `SELECT <expression>` takes inside the server (a DO loop that plans and runs it
    `statements` times, as the application role with the tenant's proof set; best of `repeats`): what a
    policy's tenant check costs each statement that reads a tenant table, free of client round trips."""
    from django.db import connections, transaction

    from tenants.db_wall import tenant_statements

    conn = connections["default"]
    best = float("inf")
    with transaction.atomic(), conn.cursor() as cur:
        cur.execute(tenant_statements(tenant_id))
        for _ in range(repeats):
            cur.execute(f"""DO $$ DECLARE started timestamptz := clock_timestamp(); got bigint; BEGIN
                FOR i IN 1..{int(statements)} LOOP EXECUTE 'SELECT {expression.replace("'", "''")}' INTO got; END LOOP;
                PERFORM set_config('bench.us', (extract(epoch FROM clock_timestamp() - started) * 1e6
                                                / {int(statements)})::text, true); END $$""")  # noqa: S608  (FORMS)
            cur.execute("SELECT current_setting('bench.us')::float8")
            best = min(best, float(cur.fetchone()[0]))
    return best


def wall_calls(run_searches) -> tuple[int, float, int]:
    """(calls, ms spent in grounded_tenant(), searches) over `run_searches()`, from pg_stat_user_functions
    (track_functions = 'pl' for the database's new sessions): the wall's own cost, free of the load's noise."""
    from django.db import connections

    from kb.retrieval.retrieve import close_side_connections

    owner = connections["owner"]
    with owner.cursor() as cur:
        cur.execute("SELECT current_database()")
        cur.execute(f'ALTER DATABASE "{cur.fetchone()[0]}" SET track_functions = \'pl\'')
    connections["default"].close()  # new sessions take the setting; so do the hybrid side connections
    close_side_connections()

    def stats() -> tuple[int, float]:
        time.sleep(1.5)  # idle backends flush their function statistics at most once a second
        with owner.cursor() as cur:
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute("SELECT coalesce(sum(calls), 0), coalesce(sum(self_time), 0) FROM pg_stat_user_functions "
                        "WHERE funcname = 'grounded_tenant'")
            calls, ms = cur.fetchone()
        return int(calls), float(ms)

    n = run_searches()  # warm: the new sessions' plans
    before = stats()
    n = run_searches()
    after = stats()
    return after[0] - before[0], after[1] - before[1], n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=10, help="timed searches per case, form and round")
    ap.add_argument("--rounds", type=int, default=24)
    args = ap.parse_args()
    on_clustered_database("bench_db_wall", args.rows, lambda d: run(args, d))


def run(args, d: dict) -> None:
    from django.db import connections

    from kb.retrieval import search
    from tenants.db_wall import key_matches
    from tenants.rls import TENANT_EXPR
    from tenants.scope import Scope

    assert key_matches(), "the wall key the database holds is not this process's (run migrate)"
    conn = connections["default"]
    small, large = layout(args.rows)[-1][2], layout(args.rows)[0][2]
    scopes = [(f"small tenant, 2 depts ({2 * small:,} rows)", 1, (0, 1)), (f"large tenant, 1 dept ({large:,} rows)", 0, (0,)),
              (f"large tenant, whole ({5 * large:,} rows)", 0, None)]
    rng = np.random.default_rng(7)
    mk = d["model_key"]
    queries = vectors("clustered", args.queries * args.rounds, rng, d["centers"])
    cases = []
    for label, ti, depts in scopes:
        scope = (Scope(d["tenants"][ti].id, all_departments=True, role="reader", principal="bench") if depts is None else
                 Scope(d["tenants"][ti].id, department_ids=frozenset(d["depts"][ti][i].id for i in depts), role="reader",
                       principal="bench"))
        for mode in ("vector", "hybrid"):
            cases.append((f"{label}, {mode}", scope, mode))

    def one(scope, mode, i: int):
        return search(scope, f"chunk {i * 37 % 500}", k=10, mode=mode, query_vectors={mk: queries[i]})

    lat: dict[tuple[str, str], list[float]] = {}
    paths: dict[tuple[str, str], set[str]] = {}
    plans: dict[tuple[str, str], list[str]] = {}
    shipped = next(name for name, expr in FORMS.items() if expr == TENANT_EXPR)
    current = shipped
    print(f"load average {Path('/proc/loadavg').read_text().split()[:3]}, {args.rounds} rounds x {args.queries} searches "
          f"per case and form\n")
    for r in range(args.rounds):
        order = list(FORMS)[r % 3:] + list(FORMS)[:r % 3]  # each form goes first, second and last in turn
        for form in order:
            switch(current, form)
            current = form
            for label, scope, mode in cases:
                for i in range(3):  # warm: plans made anew after ALTER POLICY
                    one(scope, mode, i)
                for i in range(r * args.queries, (r + 1) * args.queries):
                    t = time.perf_counter()
                    result = one(scope, mode, i)
                    lat.setdefault((label, form), []).append((time.perf_counter() - t) * 1000)
                    paths.setdefault((label, form), set()).add(result.path)
                if r == 0:
                    capture = Capture()
                    with conn.execute_wrapper(capture):
                        one(scope, mode, 0)
                    plans[(label, form)] = explain_ranking(conn, capture.scripts)
    switch(current, shipped)

    def all_cases() -> int:
        for _, scope, mode in cases:
            for i in range(args.queries):
                one(scope, mode, i)
        return len(cases) * args.queries

    calls, fn_ms, n = wall_calls(all_cases)
    pooled_legacy = statistics.median([ms for (_, form), v in lat.items() if form == "legacy" for ms in v])
    print(f"grounded_tenant() under `{shipped}`: {calls / n:.1f} calls per search, {1000 * fn_ms / max(calls, 1):.1f} us a call, "
          f"{1000 * fn_ms / n:.0f} us per search = {fn_ms / n / pooled_legacy:.1%} of the legacy median search "
          f"({pooled_legacy:.3f} ms; pg_stat_user_functions, its own timing included)")
    tenant_id = cases[0][1].tenant_id
    extra_us = statement_cost_us(FORMS[shipped], tenant_id) - statement_cost_us(FORMS["legacy"], tenant_id)
    per_search_ms = extra_us * calls / n / 1000
    print(f"server-side: the wall's check costs {extra_us:.1f} us a statement more than the old expression; x {calls / n:.1f} "
          f"calls per search = {1000 * per_search_ms:.0f} us per search = {per_search_ms / pooled_legacy:.1%} of the legacy "
          f"median search\n")
    print("| case | policy | p50 ms | p95 ms | p50 vs legacy | p95 vs legacy | paths |")
    print("|---|---|---:|---:|---:|---:|---|")
    pooled: dict[str, list[float]] = {}
    for label, _, _ in cases:
        base50, base95 = percentiles(lat[(label, "legacy")])
        for form in FORMS:
            p50, p95 = percentiles(lat[(label, form)])
            pooled.setdefault(form, []).extend(lat[(label, form)])
            print(f"| {label} | {form} | {p50:.3f} | {p95:.3f} | {p50 / base50 - 1:+.1%} | {p95 / base95 - 1:+.1%} | "
                  f"{', '.join(sorted(paths[(label, form)]))} |")
    print()
    base = statistics.median(pooled["legacy"])
    mean_base = statistics.fmean(pooled["legacy"])
    for form in FORMS:
        per_case = [percentiles(lat[(label, form)])[0] / percentiles(lat[(label, "legacy")])[0] for label, _, _ in cases]
        print(f"all cases, {form}: median {statistics.median(pooled[form]):.3f} ms ({statistics.median(pooled[form]) / base - 1:+.1%}), "
              f"mean {statistics.fmean(pooled[form]):.3f} ms ({statistics.fmean(pooled[form]) / mean_base - 1:+.1%}), "
              f"median of the cases' p50 ratios {statistics.median(per_case) - 1:+.1%}")
    print(f"load average at the end {Path('/proc/loadavg').read_text().split()[:3]}")
    print("\nRanking statements' scan nodes (EXPLAIN ANALYZE of the prepared statement each search ran):")
    for label, _, _ in cases:
        for form in FORMS:
            print(f"\n  {label} / {form}:")
            for line in plans[(label, form)]:
                print(f"    {line}")


if __name__ == "__main__":
    main()
