"""Filtered top-10 vector search at several scope sizes: kb.retrieval.search vs Chroma vs numpy brute force.

    .venv/bin/python bench/retrieval_bench.py [--rows 100000] [--queries 200] [--no-chroma] [--keep-db]

For each vector distribution (clustered, and uniformly random as the worst case) it creates its own
database (bench_retrieval_<pid>_<kind>) on the configured server, loads `rows` chunks with COPY as
the owner, builds the HNSW index after loading, then times, for tenant-and-department filtered
queries at each scope size, every engine on the same query in turn (interleaved):

- ours: `kb.retrieval.search(scope, ..., mode="vector")`, the real code path through Django (RLS
  tenant, SET LOCALs, corpus resolution, hit rows), with the path chosen in code over the model's
  index and the scope indexes ingestion would build for the large tenant and its departments
  (kb.vector_index.ensure_scope_indexes); plus each path forced, and the model's index alone, to
  show the crossover the default thresholds are based on; and "ours, plan per search" with
  RETRIEVAL_REUSE_PLANS off (the corpus statement in a round trip of its own, as before issue 31);
- Chroma (`where` on tenant and department) on the same vectors;
- numpy brute force over the scoped rows (pre-sliced matrix: the floor).

recall@10 is against exact search over the scope. Latency tables print p50/p95 and the ratio of
our p95 to the floor's p95. Nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# One BLAS thread (set before numpy loads): the floor is a single-core brute force, and on a shared
# machine threaded BLAS oversubscribes the cores (measured: 100x slower p50 at load 11).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdb import create_database, drop_database  # noqa: E402  (bench/ is on sys.path when run as a script)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")

DIM = 384
N_SMALL_TENANTS = 20
N_DEPTS = 5
DISTRIBUTIONS = {"clustered": "minilm-l6-v2:384", "uniform": "bench-uniform:384"}


@dataclass
class ScopeCase:
    label: str
    tenant: int  # index into the tenant list (0 = the large tenant)
    depts: tuple[int, ...] | None  # department indexes, None = whole tenant


# --- Data ---------------------------------------------------------------------------------------

def layout(rows: int) -> list[tuple[int, int, int]]:
    """(tenant index, department index, row count) blocks: one large tenant with half, 20 small ones share the rest."""
    blocks = []
    large = rows // 2
    for d in range(N_DEPTS):
        blocks.append((0, d, large // N_DEPTS))
    small_each = (rows - large) // (N_SMALL_TENANTS * N_DEPTS)
    for t in range(1, N_SMALL_TENANTS + 1):
        for d in range(N_DEPTS):
            blocks.append((t, d, small_each))
    return blocks


def vectors(kind: str, n: int, rng: np.random.Generator, centers: np.ndarray | None = None) -> np.ndarray:
    if kind == "uniform":
        x = rng.standard_normal((n, DIM), dtype=np.float32)
    else:
        assert centers is not None
        assign = rng.integers(0, len(centers), n)
        x = centers[assign] + rng.standard_normal((n, DIM), dtype=np.float32) * (0.6 / np.sqrt(DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def load(kind: str, rows: int, seed: int) -> dict:
    """Tenants, departments, corpora, documents via the ORM; chunks by binary COPY. Returns ids and vectors."""
    from django.db import connections
    from pgvector import HalfVector
    from pgvector.psycopg import register_vector

    from kb.models import Corpus, Document
    from tenants.models import Department, Tenant

    model_key = DISTRIBUTIONS[kind]
    model, dim = model_key.split(":")
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(rows // 100, 10), DIM), dtype=np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    owner = connections["owner"]
    owner.ensure_connection()
    conn = owner.connection
    register_vector(conn)
    now = dt.datetime.now(dt.UTC)
    with conn.cursor() as cur:
        cur.execute("DROP INDEX IF EXISTS chunk_hnsw_minilm_l6_v2_384")  # rebuilt after loading
    conn.commit()
    tenants = [Tenant.objects.using("owner").create(name=f"Bench {kind} {i}", slug=f"bench-{kind}-{i}")
               for i in range(N_SMALL_TENANTS + 1)]
    depts = [[Department.objects.using("owner").create(tenant=t, name=f"D{d}") for d in range(N_DEPTS)] for t in tenants]
    vecs, tenant_of, dept_of = [], [], []
    for ti, di, n in layout(rows):
        t, d = tenants[ti], depts[ti][di]
        corpus = Corpus.objects.unscoped_dangerously(using="owner").create(
            tenant=t, department=d, name=f"{kind}-{di}", embedding_model=model, embedding_dim=int(dim), chunk_count=n)
        docs = Document.objects.unscoped_dangerously(using="owner").bulk_create([
            Document(tenant=t, department=d, corpus=corpus, title=f"{kind} doc {j}", source_name=f"{kind}-{di}-{j}",
                     mime_type="text/plain", sha256="0" * 64, status="ready", chunk_count=min(50, n - j * 50))
            for j in range((n + 49) // 50)])
        x = vectors(kind, n, rng, centers)
        with conn.cursor() as cur, cur.copy(
                "COPY kb_chunk (tenant_id, department_id, corpus_id, document_id, ordinal, text, locator, char_start, "
                "char_end, token_count, content_hash, embedding, embedding_model, flags, created_at) "
                "FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "int8", "int8", "int8", "int4", "text", "text", "int4", "int4", "int4", "text",
                            "halfvec", "text", "jsonb", "timestamptz"])
            for i in range(n):
                copy.write_row([t.id, d.id, corpus.id, docs[i // 50].id, i % 50, f"{kind} chunk {i}", f"#{i}", 0, 10, 3,
                                "h", HalfVector(x[i]), model_key, "[]", now])
        vecs.append(x)
        tenant_of.append(np.full(n, ti, dtype=np.int16))
        dept_of.append(np.full(n, di, dtype=np.int16))
    conn.commit()
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM kb_chunk WHERE embedding_model = %s ORDER BY id", [model_key])
        ids = np.array([r[0] for r in cur.fetchall()], dtype=np.int64)
    return {"ids": ids, "x": np.concatenate(vecs), "tenant": np.concatenate(tenant_of), "dept": np.concatenate(dept_of),
            "centers": centers, "model_key": model_key, "tenants": tenants, "depts": depts, "kind": kind}


def build_index(model_key: str, scope_indexes: bool = True) -> tuple[float, float, list[str]]:
    """The model's HNSW index, then (as ingestion would) the scope indexes of its large tenants and
    departments (kb.vector_index.ensure_scope_indexes). Returns both build times and the scope index names."""
    from django.db import connections

    from kb.vector_index import cast_type, ensure_scope_indexes, opclass

    t = time.perf_counter()
    with connections["owner"].cursor() as cur:
        cur.execute("SET maintenance_work_mem = '2GB'")
        cur.execute("SET max_parallel_maintenance_workers = 1")
        name = "chunk_hnsw_" + model_key.replace("-", "_").replace(":", "_")
        cur.execute(f"CREATE INDEX IF NOT EXISTS {name} ON kb_chunk USING hnsw ((embedding::{cast_type(DIM)}) "
                    f"{opclass(DIM)}) WHERE embedding_model = '{model_key}'")
    model_s = time.perf_counter() - t
    t = time.perf_counter()
    built = ensure_scope_indexes(model_key, DIM, force=True) if scope_indexes else []
    scope_s = time.perf_counter() - t
    with connections["owner"].cursor() as cur:
        cur.execute("ANALYZE kb_chunk")
        cur.execute("ANALYZE kb_document")
        cur.execute("ANALYZE kb_corpus")
    return model_s, scope_s, built


# --- Measurement --------------------------------------------------------------------------------

def on_clustered_database(prefix: str, rows: int, body) -> None:
    """`body(d)` on a scratch database named `<prefix>_<pid>` holding `rows` clustered vectors (seed 42)
    with its indexes built; the database is dropped after, whatever happens."""
    dbname = f"{prefix}_{os.getpid()}"
    create_database(dbname)
    try:
        d = load("clustered", rows, 42)
        build_index(d["model_key"])
        body(d)
    finally:
        drop_database(dbname)


def percentiles(ms: list[float]) -> tuple[float, float]:
    s = sorted(ms)
    return statistics.median(s), s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def exact_topk(x: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    sims = x @ q
    if len(sims) <= k:
        return ids[np.argsort(-sims)]
    part = np.argpartition(-sims, k)[:k]
    return ids[part[np.argsort(-sims[part])]]


class Engine:
    """One way of answering a scoped top-k query; timed per query, interleaved with the others."""

    def __init__(self, name: str, fn, n_queries: int, path: str = "") -> None:
        self.name, self.fn, self.n, self.path = name, fn, n_queries, path
        self.lat: list[float] = []
        self.recall: list[float] = []
        self.short = 0
        self.paths: set[str] = set()

    def run(self, i: int, q: np.ndarray, gold: set[int], k: int) -> None:
        if i >= self.n:
            return
        t = time.perf_counter()
        got, path = self.fn(q)
        self.lat.append((time.perf_counter() - t) * 1000)
        self.recall.append(len(gold & set(got)) / len(gold))
        self.short += len(got) < k
        if path:
            self.paths.add(path)

    def row(self) -> dict:
        p50, p95 = percentiles(self.lat)
        return {"p50": p50, "p95": p95, "recall": float(np.mean(self.recall)), "short": self.short,
                "path": ",".join(sorted(self.paths)), "n": len(self.lat)}


def ours(scope, model_key: str, k: int, **overrides):
    from django.conf import settings

    from kb.retrieval import search

    def fn(q: np.ndarray):
        saved = {name: getattr(settings, name, None) for name in overrides}
        for name, value in overrides.items():
            setattr(settings, name, value)
        try:
            res = search(scope, "", k=k, mode="vector", query_vectors={model_key: q})
        finally:
            for name, value in saved.items():
                if value is None:
                    delattr(settings, name)
                else:
                    setattr(settings, name, value)
        return [h.chunk_id for h in res.hits], res.path.split(":", 2)[-1]

    return fn


def brute_force(x: np.ndarray, ids: np.ndarray, k: int):
    return lambda q: (exact_topk(x, ids, q, k).tolist(), "")


def chroma_load(d: dict, path: str):
    import chromadb

    client = chromadb.PersistentClient(path=path)
    col = client.create_collection(f"bench_{d['kind']}", metadata={"hnsw:space": "cosine"})
    step = 5000
    for i in range(0, len(d["ids"]), step):
        col.add(ids=[str(v) for v in d["ids"][i:i + step]], embeddings=d["x"][i:i + step],
                metadatas=[{"tenant": int(t), "dept": int(p)} for t, p in zip(d["tenant"][i:i + step], d["dept"][i:i + step],
                                                                              strict=True)])
    return col


def chroma(col, case: ScopeCase, k: int):
    where: dict = {"tenant": case.tenant}
    if case.depts is not None:
        where = {"$and": [{"tenant": case.tenant}, {"dept": {"$in": list(case.depts)}}]}

    def fn(q: np.ndarray):
        res = col.query(query_embeddings=[q], n_results=k, where=where, include=["distances"])
        return [int(v) for v in res["ids"][0]], ""

    return fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows per distribution")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--chroma-queries", type=int, default=100)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--distributions", default="clustered,uniform")
    ap.add_argument("--no-chroma", action="store_true")
    ap.add_argument("--no-sweep", action="store_true", help="skip the forced-path / ef_search sweep")
    ap.add_argument("--efs", default="40,100,200", help="ef_search values of the forced-HNSW sweep")
    ap.add_argument("--keep-db", action="store_true")
    ap.add_argument("--no-scope-indexes", action="store_true",
                    help="do not build the per-tenant / per-department indexes (the model's index only)")
    args = ap.parse_args()

    print(f"{args.rows:,} rows per distribution; {args.queries} queries per scope ({args.chroma_queries} for Chroma); "
          f"k={args.k}; engines interleaved query by query in a random order so machine noise and cache "
          "warmth hit all alike")
    summary = []
    for kind in args.distributions.split(","):
        dbname = f"bench_retrieval_{os.getpid()}_{kind}"
        t = time.perf_counter()
        create_database(dbname)
        chroma_dir = tempfile.mkdtemp(prefix="bench_chroma_")
        try:
            d = load(kind, args.rows, args.seed)
            loaded_s = time.perf_counter() - t
            model_s, scope_s, built = build_index(d["model_key"], not args.no_scope_indexes)
            print(f"\n[{kind}] loaded {args.rows:,} chunks into {dbname} in {loaded_s:.1f}s; "
                  f"HNSW index (m=16, ef_construction=64) built in {model_s:.1f}s; {len(built)} scope indexes "
                  f"({', '.join(built) or 'none'}) in {scope_s:.1f}s", flush=True)
            summary += report(args, d, chroma_dir)
        finally:
            shutil.rmtree(chroma_dir, ignore_errors=True)
            if not args.keep_db:
                drop_database(dbname)
    print(f"\n## Targets (ours, auto path, clustered vectors): recall@10 >= 0.98, p95 <= 3x the numpy floor's p95 and "
          f"<= 0.1x Chroma's (same run; load average {Path('/proc/loadavg').read_text().split()[0]} at the end)\n")
    for kind, label, r, floor, ch in summary:
        vs_floor = r["p95"] / floor["p95"]
        vs_chroma = r["p95"] / ch["p95"] if ch else float("nan")
        ok = r["recall"] >= 0.98 and vs_floor <= 3 and (ch is None or vs_chroma <= 0.1)
        print(f"- {kind:9} {label:34} recall {r['recall']:.3f}  p95 {r['p95']:.2f} ms = {vs_floor:.1f}x floor, "
              f"{vs_chroma:.2f}x Chroma  {'met' if ok else 'NOT met'}")


def report(args, d: dict, chroma_dir: str) -> list:
    from tenants.scope import Scope

    small_rows = layout(args.rows)[-1][2]
    large_rows = layout(args.rows)[0][2]
    cases = [
        ScopeCase(f"small tenant, 2 depts ({2 * small_rows:,})", 1, (0, 1)),
        ScopeCase(f"small tenant, all ({N_DEPTS * small_rows:,})", 2, None),
        ScopeCase(f"large tenant, 1 dept ({large_rows:,})", 0, (0,)),
        ScopeCase(f"large tenant, 2 depts ({2 * large_rows:,})", 0, (0, 1)),
        ScopeCase(f"large tenant, all ({N_DEPTS * large_rows:,})", 0, None),
    ]
    rng = np.random.default_rng(args.seed + 1)
    k, nq = args.k, args.queries
    col = None
    if not args.no_chroma:
        t = time.perf_counter()
        col = chroma_load(d, chroma_dir)
        print(f"[{d['kind']}] Chroma collection loaded in {time.perf_counter() - t:.1f}s")
    print(f"\n## {d['kind']} vectors ({d['model_key']})\n")
    print("| scope (rows) | engine | path | p50 ms | p95 ms | recall@10 | queries < k | p95 / floor p95 | p95 / Chroma p95 |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    summary = []
    for case in cases:
        mask = d["tenant"] == case.tenant
        if case.depts is not None:
            mask &= np.isin(d["dept"], case.depts)
        x, ids = np.ascontiguousarray(d["x"][mask]), d["ids"][mask]
        queries = vectors(d["kind"], nq, rng, d["centers"])
        truth = [set(exact_topk(x, ids, q, k).tolist()) for q in queries]
        tenant = d["tenants"][case.tenant]
        scope = (Scope(tenant.id, all_departments=True, role="reader", principal="bench") if case.depts is None else
                 Scope(tenant.id, department_ids=frozenset(d["depts"][case.tenant][i].id for i in case.depts), role="reader",
                       principal="bench"))
        mk = d["model_key"]
        engines = [Engine("ours (auto)", ours(scope, mk, k), nq),
                   # The same without reusing the scope's corpus rows: one more round trip per search.
                   Engine("ours, plan per search", ours(scope, mk, k, RETRIEVAL_REUSE_PLANS=False), nq)]
        if not args.no_sweep:
            engines.append(Engine("ours, forced exact", ours(scope, mk, k, RETRIEVAL_EXACT_MAX_ROWS=10**12), nq))
            engines.append(Engine("ours, model index only", ours(scope, mk, k, RETRIEVAL_SCOPE_INDEXES=False), nq))
            for ef in (int(x) for x in args.efs.split(",")):
                engines.append(Engine(f"ours, forced HNSW ef={ef}", ours(scope, mk, k, RETRIEVAL_EXACT_MAX_ROWS=0,
                                                                         RETRIEVAL_HNSW_TUPLE_COST=0.0,
                                                                         RETRIEVAL_HNSW_EF_SEARCH=ef), nq))
        if col is not None:
            engines.append(Engine("Chroma 1.5.9 where", chroma(col, case, k), min(args.chroma_queries, nq)))
        floor = Engine("numpy brute force", brute_force(x, ids, k), nq)
        engines.append(floor)
        for e in engines:  # warm-up
            e.fn(queries[0])
        order = np.random.default_rng(args.seed + 2)
        for i, (q, gold) in enumerate(zip(queries, truth, strict=True)):
            # Shuffle who goes first: the first engine on a query pays for the pages the others reuse.
            for j in order.permutation(len(engines)):
                engines[j].run(i, q, gold, k)
        f = floor.row()
        ch = next((e.row() for e in engines if e.name.startswith("Chroma")), None)
        for e in engines:
            r = e.row()
            vs_chroma = f"{r['p95'] / ch['p95']:.2f}x" if ch else ""
            print(f"| {case.label} | {e.name} | {r['path']} | {r['p50']:.2f} | {r['p95']:.2f} | {r['recall']:.3f} | "
                  f"{r['short']} | {r['p95'] / f['p95']:.1f}x | {vs_chroma} |", flush=True)
        summary.append((d["kind"], case.label, engines[0].row(), f, ch))
    return summary


if __name__ == "__main__":
    main()
