"""Growth benchmark: filtered top-10 vector search as chunk tables grow to 10k, 100k and 1M rows,
with today's `vector` storage and with `halfvec`.

    python -m bench.growth                      # 10k and 100k rows
    python -m bench.growth --full               # 10k, 100k and 1M rows (30-60 min on 2 cores)
    python -m bench.growth --sizes 10000 --queries 50 --json /tmp/growth.json --keep
    python -m bench.growth --sizes 100000,1000000 --storages halfvec --keep --reuse   # measure kept tables again
    python -m bench.growth --vectors chunks.npy --queries-from questions.npy   # a real model's vectors

Data. One scratch database (`grounded_growth`, dropped at the end unless --keep) on the embedded
server; product data is never touched. Per storage one kb_chunk-shaped table (the columns a
vector search reads, kb_chunk's two b-tree indexes on tenant/department/model and corpus/model,
a short text), holding 384-d unit vectors (MiniLM's dimension) of model key `minilm-l6-v2:384`.
Rows belong to 100 tenants: tenant 1 holds 1 % of the rows, tenant 2 holds 10 %, tenants 3-100
share the remaining 89 % evenly. Each tenant's vectors are clustered around its own topics (one
centre per 100 of its rows, Gaussian noise of norm 0.6 around it, normalised), as a tenant's
corpus is about its own subjects; queries are drawn the same way from the searched scope's
centres. Rows arrive in shuffled 50-row documents (tenants ingest concurrently), by binary COPY.

Scopes. "1 %" and "10 %" are searches of tenant 1 and tenant 2 (tenant filter, the product's
statement); "100 %" is a one-tenant installation, every row in scope: the same statement without
the tenant term (the filter would keep every row).

Storage and indexes, as the product builds them (kb.vector_index): the model's partial HNSW
expression index, `(embedding::vector(384)) vector_cosine_ops` today or
`(embedding::halfvec(384)) halfvec_cosine_ops` on halfvec, m=16, ef_construction=64, plus the
partial scope indexes `wanted_scope_indexes` selects (VECTOR_SCOPE_INDEX_MIN_ROWS /
VECTOR_SCOPE_INDEX_MAX_SHARE) for the two measured tenants. The product would also build them for
tenants 3-100 once they pass the threshold (at 1M rows); they do not serve the measured queries
and are left out (bytes are without them, for both storages alike).

Search: the product's plan choice (kb.retrieval.vector.choose_vector_plan with the product's
tunables: exact scan, the model's index or the tenant's scope index) and its statements (exact
filter-first scan, or the relaxed-order iterative HNSW scan with its SET LOCALs, re-sorted, with
the exact fallback when it comes back short), as prepared statements with generic plans, each
query measured after one unmeasured pass over them all (--no-warm: from the first), storages
alternating query by query. recall@10 is against exact float32 search (numpy) over the same scope:
halfvec's rounding counts. Tables are named per storage and size (growth_chunk_halfvec_1000000);
--keep keeps them and the database, --reuse measures kept ones instead of loading them again.
Row-level security (a policy on tenant_id) is not modelled. Nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# One BLAS thread (set before numpy loads): a shared 2-core machine; see bench/retrieval_bench.py.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")

import numpy as np  # noqa: E402

DIM = 384
MODEL_KEY = "minilm-l6-v2:384"
N_TENANTS = 100
DOC_ROWS = 50
ROWS_PER_CENTRE = 100
NOISE = 0.6
DBNAME = "grounded_growth"
STORAGES = ("vector", "halfvec")
SCOPES = {"1 %": 1, "10 %": 2, "100 %": None}  # scope label -> tenant id (None: every row)


def tenant_rows(rows: int) -> dict[int, int]:
    """Rows per tenant id: tenant 1 holds 1 %, tenant 2 10 %, tenants 3..100 share the rest evenly."""
    out = {1: rows // 100, 2: rows // 10}
    rest = rows - out[1] - out[2]
    others = N_TENANTS - 2
    for i, t in enumerate(range(3, N_TENANTS + 1)):
        out[t] = rest // others + (1 if i < rest % others else 0)
    return out


@dataclass
class Data:
    """The generated rows, in insertion order (shuffled documents), and each tenant's cluster centres."""

    x: np.ndarray  # (rows, DIM) float32, unit length
    tenant: np.ndarray  # (rows,) tenant id per row
    ordinal: np.ndarray  # position of the row in its document
    document: np.ndarray  # synthetic document id per row
    centres: dict[int, np.ndarray] = field(default_factory=dict)
    queries: np.ndarray | None = None  # given query vectors (--real), else drawn around the scope's centres


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def around(centres: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` unit vectors, each near a random one of `centres`."""
    pick = centres[rng.integers(0, len(centres), n)]
    return unit(pick + rng.standard_normal((n, DIM), dtype=np.float32) * (NOISE / np.sqrt(DIM)))


def generate(rows: int, seed: int, real: np.ndarray | None = None) -> Data:
    """Synthetic clustered rows; with `real` (unit vectors, one per row), those, dealt to the tenants at random."""
    rng = np.random.default_rng(seed)
    sizes = tenant_rows(rows)
    per_tenant, centres = {}, {}
    deal = rng.permutation(rows) if real is not None else None
    dealt = 0
    for t, n in sizes.items():
        centres[t] = unit(rng.standard_normal((max(1, n // ROWS_PER_CENTRE), DIM), dtype=np.float32))
        if real is not None and deal is not None:
            per_tenant[t] = real[deal[dealt:dealt + n]]
            dealt += n
        else:
            per_tenant[t] = around(centres[t], n, rng)
    docs = [(t, s) for t, n in sizes.items() for s in range(0, n, DOC_ROWS)]
    order = rng.permutation(len(docs))
    x = np.empty((rows, DIM), dtype=np.float32)
    tenant = np.empty(rows, dtype=np.int64)
    ordinal = np.empty(rows, dtype=np.int32)
    document = np.empty(rows, dtype=np.int64)
    pos = 0
    for doc_id, j in enumerate(order, start=1):
        t, s = docs[j]
        block = per_tenant[t][s:s + DOC_ROWS]
        m = len(block)
        x[pos:pos + m] = block
        tenant[pos:pos + m] = t
        ordinal[pos:pos + m] = np.arange(m)
        document[pos:pos + m] = doc_id
        pos += m
    return Data(x, tenant, ordinal, document, centres)


# --- Database -------------------------------------------------------------------------------------

def connect(fresh: bool = True):
    """A psycopg connection to the scratch database on the embedded server (created anew when `fresh`)."""
    import django

    django.setup()
    import psycopg
    from django.db import connections

    with connections["owner"]._nodb_cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DBNAME])
        if fresh or cur.fetchone() is None:
            cur.execute(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{DBNAME}"')
    params = connections["owner"].get_connection_params()
    conn = psycopg.connect(host=params["host"], user=params["user"], dbname=DBNAME, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return conn


def drop_database() -> None:
    from django.db import connections

    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DBNAME}" WITH (FORCE)')


def table(storage: str, rows: int) -> str:
    return f"growth_chunk_{storage}_{rows}"


def create_table(conn, storage: str, rows: int) -> None:
    t = table(storage, rows)
    conn.execute(f"DROP TABLE IF EXISTS {t}")
    conn.execute(f"CREATE TABLE {t} (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, tenant_id bigint NOT NULL, "
                 "department_id bigint, corpus_id bigint NOT NULL, document_id bigint NOT NULL, ordinal integer NOT NULL, "
                 f"text text NOT NULL, embedding {storage}, embedding_model varchar(120) NOT NULL, "
                 "created_at timestamptz NOT NULL DEFAULT now())")
    conn.execute(f"CREATE INDEX {t}_scope ON {t} (tenant_id, department_id, embedding_model)")
    conn.execute(f"CREATE INDEX {t}_corpus ON {t} (corpus_id, embedding_model)")


def encode(x: np.ndarray, storage: str) -> list[bytes]:
    """pgvector's binary input of each row: int16 dim, int16 unused, then big-endian float4 / float2."""
    head = struct.pack(">HH", DIM, 0)
    body = x.astype(">f4" if storage == "vector" else ">f2")
    return [head + row.tobytes() for row in body]


def load(conn, storage: str, d: Data) -> float:
    """Binary COPY of every row (the storage's own encoding, made client-side); returns seconds."""
    t0 = time.perf_counter()
    t = table(storage, len(d.x))
    step = 20_000
    with conn.transaction(), conn.cursor() as cur, cur.copy(
            f"COPY {t} (tenant_id, corpus_id, document_id, ordinal, text, embedding, embedding_model) "
            "FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "int8", "int8", "int4", "text", "bytea", "text"])
        for s in range(0, len(d.x), step):
            vecs = encode(d.x[s:s + step], storage)
            for i, v in enumerate(vecs, start=s):
                tid = int(d.tenant[i])
                copy.write_row((tid, tid, int(d.document[i]), int(d.ordinal[i]), f"chunk {i} of tenant {tid}", v, MODEL_KEY))
    return time.perf_counter() - t0


def opclass(storage: str) -> tuple[str, str]:
    return (f"vector({DIM})", "vector_cosine_ops") if storage == "vector" else (f"halfvec({DIM})", "halfvec_cosine_ops")


def build_indexes(conn, storage: str, sizes: dict[int, int]) -> tuple[float, list[int]]:
    """The model's HNSW index and the measured tenants' scope indexes; returns seconds and the tenants indexed."""
    from kb.vector_index import scope_predicate, wanted_scope_indexes
    from tenants.conf import product_settings

    typ, ops = opclass(storage)
    t = table(storage, sum(sizes.values()))
    wanted = wanted_scope_indexes({(tid, None): n for tid, n in sizes.items()},
                                  int(product_settings.VECTOR_SCOPE_INDEX_MIN_ROWS),
                                  float(product_settings.VECTOR_SCOPE_INDEX_MAX_SHARE))
    scoped = [tid for tid, dept in wanted if dept == "all" and tid in (1, 2)]
    t0 = time.perf_counter()
    conn.execute(f"CREATE INDEX {t}_hnsw ON {t} USING hnsw ((embedding::{typ}) {ops}) "
                 f"WHERE embedding_model = '{MODEL_KEY}'")
    for tid in scoped:
        conn.execute(f"CREATE INDEX {t}_hnsw_t{tid} ON {t} USING hnsw ((embedding::{typ}) {ops}) "
                     f"WHERE {scope_predicate(MODEL_KEY, tid)}")
    seconds = time.perf_counter() - t0
    conn.execute(f"VACUUM ANALYZE {t}")
    return seconds, scoped


def sizes_of(conn, storage: str, rows: int) -> dict[str, int]:
    t = table(storage, rows)
    row = conn.execute(f"SELECT pg_total_relation_size('{t}'), pg_relation_size('{t}'), pg_indexes_size('{t}'), "
                       f"pg_total_relation_size('{t}') - pg_relation_size('{t}') - pg_indexes_size('{t}')").fetchone()
    hnsw = conn.execute("SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i JOIN pg_class c "
                        "ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = %s::regclass "
                        "AND a.amname = 'hnsw'", [t]).fetchone()[0]
    return {"total": row[0], "table": row[1], "indexes": row[2], "toast_fsm_vm": row[3], "hnsw": int(hnsw)}


# --- Search ---------------------------------------------------------------------------------------

def search(conn, storage: str, tenant_id: int | None, q: np.ndarray, scope_rows: int, total_rows: int,
           scoped: list[int], knobs: dict, k: int) -> tuple[list[int], str]:
    """The product's vector search of one scope (kb.retrieval.vector): plan choice, statement, fallback."""
    from kb.retrieval.vector import HnswIndex, choose_vector_plan

    typ = opclass(storage)[0]
    t = table(storage, total_rows)
    ef = int(knobs["RETRIEVAL_HNSW_EF_SEARCH"])
    fetch = max(k, int(knobs["RETRIEVAL_HNSW_FETCH"]))
    indexes = [HnswIndex(None, "all", total_rows)] + [HnswIndex(tid, "all", scope_rows) for tid in scoped if tid == tenant_id]
    plan = choose_vector_plan(scope_rows, tenant_id or 0, None, indexes, ef, fetch, k, knobs=knobs)
    qlit = "[" + ",".join(f"{v:.7g}" for v in q.tolist()) + "]"
    dist = f"(c.embedding::{typ}) <=> %(q)s::{typ}"
    params: dict = {"q": qlit, "fetch": fetch, "k": k}
    if tenant_id is None:
        where, model_pred = "TRUE", f"c.embedding_model = '{MODEL_KEY}'"
    else:
        where = "c.tenant_id = %(tenant)s AND c.corpus_id = ANY(%(corpora)s)"
        model_pred = f"c.embedding_model = '{MODEL_KEY}' AND c.tenant_id = {int(tenant_id)}"
        params |= {"tenant": tenant_id, "corpora": [tenant_id]}

    def exact() -> list[int]:
        sql = (f"SELECT /* exact */ * FROM (SELECT id, score FROM (SELECT c.id, {dist} AS score FROM {t} c "  # noqa: S608
               f"WHERE {where} AND {model_pred} OFFSET 0) e ORDER BY score LIMIT %(k)s) ranked")
        with conn.transaction():
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            return [r[0] for r in conn.execute(sql, params, prepare=True).fetchall()]

    if plan.kind == "exact":
        return exact(), "exact"
    sql = (f"SELECT /* hnsw index */ * FROM (SELECT c.id, {dist} AS score FROM {t} c WHERE {where} AND {model_pred} "  # noqa: S608
           f"ORDER BY {dist} LIMIT %(fetch)s) relaxed ORDER BY score + 0 LIMIT %(k)s")
    with conn.transaction():
        conn.execute(f"SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {ef}; "
                     f"SET LOCAL hnsw.max_scan_tuples = {int(knobs['RETRIEVAL_HNSW_MAX_SCAN_TUPLES'])}; "
                     "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off; "
                     "SET LOCAL plan_cache_mode = force_generic_plan")
        got = [r[0] for r in conn.execute(sql, params, prepare=True).fetchall()]
    where_ix = "tenant" if plan.index is not None and plan.index.tenant_id is not None else "model"
    if len(got) >= min(k, scope_rows):
        return got, f"hnsw({where_ix} index)"
    return exact(), "exact(after hnsw)"


def exact_topk(x: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> set[int]:
    sims = x @ q
    if len(sims) <= k:
        return set(ids.tolist())
    return set(ids[np.argpartition(-sims, k)[:k]].tolist())


def percentiles(ms: list[float]) -> tuple[float, float]:
    s = sorted(ms)
    return statistics.median(s), s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def measure(conn, d: Data, ids: dict[str, np.ndarray], scoped: dict[str, list[int]], args) -> dict:
    """Per scope and storage: p50/p95 ms, recall@10 and the paths taken.

    Every query runs once unmeasured first (a server that has been serving: its pages cached, its
    statements prepared), then measured; storages alternate query by query, which goes first too.
    """
    from kb.retrieval.tunables import snapshot

    knobs = snapshot()
    storages = list(ids)
    ref = ids[storages[0]]  # row i of every table is the same vector: compare by position
    rng = np.random.default_rng(args.seed + 1)
    out: dict = {}
    for label, tid in SCOPES.items():
        mask = np.ones(len(d.x), dtype=bool) if tid is None else d.tenant == tid
        n_scope = int(mask.sum())
        xs = np.ascontiguousarray(d.x[mask])
        centres = np.concatenate(list(d.centres.values())) if tid is None else d.centres[tid]
        queries = d.queries[:args.queries] if d.queries is not None else around(centres, args.queries, rng)
        per: dict[str, dict] = {s: {"lat": [], "recall": [], "paths": set()} for s in storages}
        for q in queries if args.warm else queries[:1]:
            for s in storages:
                search(conn, s, tid, q, n_scope, len(d.x), scoped[s], knobs, args.k)
        for i, q in enumerate(queries):
            gold = {int(v) for v in exact_topk(xs, ref[mask], q, args.k)}
            for s in (storages if i % 2 == 0 else storages[::-1]):
                t0 = time.perf_counter()
                got, path = search(conn, s, tid, q, n_scope, len(d.x), scoped[s], knobs, args.k)
                per[s]["lat"].append((time.perf_counter() - t0) * 1000)
                found = {int(ref[p]) for p in np.searchsorted(ids[s], got)}
                per[s]["recall"].append(len(gold & found) / len(gold))
                per[s]["paths"].add(path)
        out[label] = {}
        for s in storages:
            p50, p95 = percentiles(per[s]["lat"])
            out[label][s] = {"rows": n_scope, "p50_ms": p50, "p95_ms": p95,
                             "recall": float(np.mean(per[s]["recall"])), "paths": sorted(per[s]["paths"])}
    return out


def run_size(conn, rows: int, args) -> dict:
    """Generate, load each storage (or reuse its table: --reuse), index, measure one size; prints as it goes."""
    t0 = time.perf_counter()
    if args.vectors:
        real = unit(np.load(args.vectors).astype(np.float32))
        d = generate(len(real), args.seed, real)
        d.queries = unit(np.load(args.queries_from).astype(np.float32))
        rows = len(real)
    else:
        d = generate(rows, args.seed)
    print(f"\n## {rows:,} rows (generated in {time.perf_counter() - t0:.0f}s)", flush=True)
    sizes = tenant_rows(rows)
    res: dict = {"rows": rows, "storage": {}, "load_average_start": Path("/proc/loadavg").read_text().split()[0]}
    ids, scoped = {}, {}
    for s in args.storages:
        t = table(s, rows)
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [t]).fetchone()[0]
        if args.reuse and exists:
            scoped[s] = [tid for tid in (1, 2) if conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                                                 [f"{t}_hnsw_t{tid}"]).fetchone()[0]]
            res["storage"][s] = {"reused": True, "scope_indexes": scoped[s]}
        else:
            create_table(conn, s, rows)
            secs = load(conn, s, d)
            build_s, scoped[s] = build_indexes(conn, s, sizes)
            res["storage"][s] = {"insert_rows_per_s": rows / secs, "index_build_s": build_s, "scope_indexes": scoped[s]}
        rows_ids = conn.execute(f"SELECT id FROM {t} ORDER BY id").fetchall()  # noqa: S608  (a bench table)
        ids[s] = np.array([r[0] for r in rows_ids], dtype=np.int64)
        b = res["storage"][s]["bytes"] = sizes_of(conn, s, rows)
        built = ("reused" if args.reuse and exists else
                 f"COPY {rows / secs:,.0f} rows/s; HNSW build {build_s:.1f}s (model index + scope indexes of tenants "
                 f"{scoped[s] or 'none'})")
        print(f"- {s}: {built}; bytes total {b['total'] / 2**20:,.1f} MiB = table {b['table'] / 2**20:,.1f} + "
              f"indexes {b['indexes'] / 2**20:,.1f} (HNSW {b['hnsw'] / 2**20:,.1f}) + toast/fsm/vm {b['toast_fsm_vm'] / 2**20:,.1f}",
              flush=True)
    if set(STORAGES) <= set(res["storage"]):
        vb, hb = res["storage"]["vector"]["bytes"], res["storage"]["halfvec"]["bytes"]
        res["halfvec_over_vector_bytes"] = {key: hb[key] / vb[key] for key in ("total", "table", "indexes", "hnsw") if vb[key]}
        print("- halfvec / vector bytes: " + ", ".join(f"{key} {v:.3f}" for key, v in res["halfvec_over_vector_bytes"].items()))
    res["search"] = measure(conn, d, ids, scoped, args)
    res["load_average_end"] = Path("/proc/loadavg").read_text().split()[0]
    print("\n| scope (rows) | storage | path | p50 ms | p95 ms | recall@10 |\n|---|---|---|---:|---:|---:|")
    for label, per in res["search"].items():
        for s, r in per.items():
            print(f"| {label} ({r['rows']:,}) | {s} | {', '.join(r['paths'])} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
                  f"{r['recall']:.3f} |", flush=True)
    if not args.keep:
        for s in args.storages:
            conn.execute(f"DROP TABLE {table(s, rows)}")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="add the 1M-row step")
    ap.add_argument("--sizes", default="", help="comma-separated row counts instead of 10k,100k[,1M]")
    ap.add_argument("--queries", type=int, default=200, help="queries per scope (each on both storages)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--keep", action="store_true", help=f"keep the {DBNAME} database and its tables (one per storage and size)")
    ap.add_argument("--reuse", action="store_true", help="measure tables a --keep run left (same sizes and seed) instead of "
                    "loading them again")
    ap.add_argument("--storages", default=",".join(STORAGES), help="comma-separated: vector, halfvec (default both)")
    ap.add_argument("--no-warm", dest="warm", action="store_false", help="measure from the first query (cold caches) "
                    "instead of after one unmeasured pass over the queries")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--vectors", help="instead of synthetic rows: these unit vectors (.npy, rows x 384), e.g. a real "
                    "model's chunk embeddings; one size, their count")
    ap.add_argument("--queries-from", dest="queries_from", help="with --vectors: the query vectors (.npy, n x 384)")
    args = ap.parse_args()
    if bool(args.vectors) != bool(args.queries_from):
        ap.error("--vectors and --queries-from go together")
    args.storages = [x for x in args.storages.split(",") if x]
    if not set(args.storages) <= set(STORAGES) or not args.storages:
        ap.error(f"--storages: some of {', '.join(STORAGES)}")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [10_000, 100_000] + ([1_000_000] if args.full else [])
    if args.vectors:
        sizes = [0]  # replaced by the count of --vectors
    conn = connect(fresh=not args.reuse)
    # Index builds as an operator would run them at this size: the graph in memory, one helper process.
    conn.execute("SET maintenance_work_mem = '8GB'")
    conn.execute("SET max_parallel_maintenance_workers = 1")
    version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    print(f"pgvector {version}; {args.queries} queries per scope, k={args.k}; load average "
          f"{Path('/proc/loadavg').read_text().split()[0]} at the start", flush=True)
    results = []
    try:
        for rows in sizes:
            results.append(run_size(conn, rows, args))
            if args.json:
                Path(args.json).write_text(json.dumps({"pgvector": version, "sizes": results}, indent=1))
    finally:
        conn.close()
        if not args.keep:
            drop_database()
    by_rows = {r["rows"]: r for r in results}
    if 100_000 in by_rows and 1_000_000 in by_rows:
        print("\n## 1M / 100k p95\n")
        for label in SCOPES:
            for s in args.storages:
                a, b = by_rows[100_000]["search"][label][s], by_rows[1_000_000]["search"][label][s]
                print(f"- {label} {s}: {b['p95_ms']:.2f} / {a['p95_ms']:.2f} ms = {b['p95_ms'] / a['p95_ms']:.2f}x")
    print(f"\nload average {Path('/proc/loadavg').read_text().split()[0]} at the end")


if __name__ == "__main__":
    sys.exit(main())
