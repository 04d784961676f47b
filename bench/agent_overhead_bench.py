"""The agent loop's own overhead per tool call at 100,000 chunks: everything except model time.

    .venv/bin/python bench/agent_overhead_bench.py [--rows 100000] [--runs 20] [--keep-db]

Creates its own database (bench_agents_<pid>), bulk-loads `rows` synthetic policy-like chunks as the
owner with binary COPY (hash:64 vectors, so query embedding costs microseconds and the measurement
is the loop and the database, not a neural model), builds the HNSW index and search vectors, then
runs `agents.services.ask` with a scripted provider that answers instantly. Per run:

    overhead per tool call = (ask() wall time - time inside the provider) / tool calls

which includes tool dispatch and validation, retrieval (real SQL at 100k rows), rendering of tool
output, citation checks and writing the run + steps + citations with its hash-chain link.
Target: < 20 ms per tool call. Nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdb import create_database, drop_database  # noqa: E402  (bench/ is on sys.path when run as a script)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")

MODEL_KEY = "hash:64"
DOCS_PER_CORPUS = 500
CHUNKS_PER_DOC = 40
VOCABULARY = 8000  # pseudo-words with a Zipf distribution, like real policy text after stopword removal
ZIPF_S = 1.05
TOPICS = ("hotel", "flight", "train", "taxi", "meal", "leave", "sick", "parental", "holiday", "password", "laptop", "vpn",
          "expense", "receipt", "mileage", "insurance", "visa", "conference", "training", "overtime", "allowance", "remote")
_SYLLABLES = ("ka", "lo", "mi", "ter", "san", "vo", "pel", "dra", "nu", "bes", "cor", "fin", "gal", "hux", "jor", "lem",
              "mar", "nod", "pra", "quo", "ris", "sto", "tul", "ven", "wyr", "zan")


def vocabulary(rng: random.Random) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < VOCABULARY:
        words.setdefault("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))), None)
    return list(words)


class TextGen:
    """Chunk texts of 60-120 words drawn from a Zipfian vocabulary, each about one topic; queries of mid-frequency words."""

    def __init__(self, seed: int) -> None:
        import numpy as np

        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.words = vocabulary(self.rng)
        weights = 1.0 / np.arange(1, VOCABULARY + 1) ** ZIPF_S
        self.p = weights / weights.sum()

    def texts(self, n: int) -> list[str]:
        lengths = self.np_rng.integers(60, 121, n)
        draws = self.np_rng.choice(VOCABULARY, size=int(lengths.sum()), p=self.p)
        out, at = [], 0
        for length in lengths:
            ws = [self.words[i] for i in draws[at:at + length]]
            at += length
            topic = self.rng.choice(TOPICS)
            ws.insert(0, topic.capitalize())
            ws[self.rng.randrange(1, len(ws))] = topic
            out.append(" ".join(ws) + f". Limit {self.rng.randint(10, 500)} EUR.")
        return out

    def query(self, rng: random.Random) -> str:
        return " ".join([rng.choice(TOPICS), *(self.words[rng.randint(50, 3000)] for _ in range(2))])


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


def use_database(dbname: str) -> None:
    import django

    django.setup()
    from django.db import connections

    for alias in ("owner", "default"):
        connections[alias].close()
        connections[alias].settings_dict["NAME"] = dbname


def reuse(rows: int) -> dict:
    from kb.models import Corpus
    from tenants.models import Department, Tenant

    tenant = Tenant.objects.get(slug="bench-co")
    return {"tenant": tenant, "depts": list(Department.objects.using("owner").filter(tenant=tenant).order_by("id")),
            "corpora": list(Corpus.objects.unscoped_dangerously("owner").filter(tenant=tenant)), "load_s": 0.0, "index_s": 0.0,
            "gen": TextGen(7)}


def load(rows: int, seed: int = 7) -> dict:
    """One large tenant (two department corpora + a shared one) holds the rows; another tenant exists too."""
    import numpy as np
    from django.db import connections
    from pgvector import HalfVector
    from pgvector.psycopg import register_vector

    from kb.embedding import HashEmbedder
    from kb.models import Corpus, Document
    from kb.vector_index import ensure_vector_index
    from tenants.models import Department, Tenant

    rng = random.Random(seed)
    gen = TextGen(seed)
    embedder = HashEmbedder(64)
    owner = connections["owner"]
    owner.ensure_connection()
    conn = owner.connection
    register_vector(conn)
    now = dt.datetime.now(dt.UTC)
    tenant = Tenant.objects.using("owner").create(name="Bench Co", slug="bench-co")
    Tenant.objects.using("owner").create(name="Other Co", slug="other-co")
    depts = [Department.objects.using("owner").create(tenant=tenant, name=n) for n in ("Engineering", "Sales")]
    per_corpus = rows // 3
    corpora = []
    t0 = time.perf_counter()
    for ci, dept in enumerate([None, *depts]):
        n = per_corpus if ci < 2 else rows - 2 * per_corpus
        corpus = Corpus.objects.unscoped_dangerously(using="owner").create(
            tenant=tenant, department=dept, name=f"corpus-{ci}", embedding_model="hash", embedding_dim=64, chunk_count=n)
        corpora.append(corpus)
        n_docs = (n + CHUNKS_PER_DOC - 1) // CHUNKS_PER_DOC
        docs = Document.objects.unscoped_dangerously(using="owner").bulk_create([
            Document(tenant=tenant, department=dept, corpus=corpus, title=f"Policy {ci}-{j}", source_name=f"p-{ci}-{j}.md",
                     mime_type="text/markdown", sha256="0" * 64, status="ready", chunk_count=CHUNKS_PER_DOC,
                     metadata={"category": rng.choice(TOPICS), "source": rng.choice(("HR", "Finance", "IT")),
                               "published_at": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"})
            for j in range(n_docs)])
        texts = gen.texts(n)
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        with conn.cursor() as cur, cur.copy(
                "COPY kb_chunk (tenant_id, department_id, corpus_id, document_id, ordinal, text, locator, char_start, char_end, "
                "token_count, content_hash, embedding, embedding_model, flags, created_at) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "int8", "int8", "int8", "int4", "text", "text", "int4", "int4", "int4", "text", "halfvec",
                            "text", "jsonb", "timestamptz"])
            for i, text in enumerate(texts):
                copy.write_row([tenant.id, dept.id if dept else None, corpus.id, docs[i // CHUNKS_PER_DOC].id, i % CHUNKS_PER_DOC,
                                text, f"Section {i % CHUNKS_PER_DOC}", 0, len(text), len(text.split()), f"{i:064x}"[-64:],
                                HalfVector(vectors[i]), MODEL_KEY, "[]", now])
    conn.commit()
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute("UPDATE kb_chunk SET search_vector = to_tsvector('english', text)")
    conn.commit()
    ensure_vector_index(MODEL_KEY, 64)
    # VACUUM, not only ANALYZE: the UPDATE above left a dead copy of every row (ingestion writes
    # search_vector with the row), which autovacuum would otherwise be clearing during the runs.
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for table in ("kb_chunk", "kb_document", "kb_corpus"):
                cur.execute(f"VACUUM (ANALYZE) {table}")
    finally:
        conn.autocommit = False
    return {"tenant": tenant, "depts": depts, "corpora": corpora, "load_s": load_s, "index_s": time.perf_counter() - t1, "gen": gen}


@dataclass
class ScriptedProvider:
    """Returns instantly: `turns` turns of tool calls drawn from `mix`, then an answer citing what it saw."""

    mix: tuple[str, ...]
    turns: int
    calls_per_turn: int
    gen: TextGen
    seed: int = 0
    name: str = "scripted"
    model: str = "bench"
    model_s: float = 0.0
    _rng: random.Random = field(default_factory=random.Random)

    def generate(self, request):
        from agents.messages import ModelTurn, ToolCall, ToolResultMessage, Usage

        t = time.perf_counter()
        seen = [r["chunk_id"] for m in request.messages if isinstance(m, ToolResultMessage)
                for r in (m.content.get("results") or []) if isinstance(r, dict) and "chunk_id" in r]
        done = sum(1 for m in request.messages if getattr(m, "tool_calls", ()))
        if not request.tools_enabled or done >= self.turns:
            text = " ".join(f"See [c:{cid}]." for cid in seen[:5]) or "NOT_ENOUGH_EVIDENCE: nothing"
            turn = ModelTurn(text=text, usage=Usage(1000, 50))
        else:
            calls = [ToolCall(f"b{done}-{i}", *self._call(self.mix[(done * self.calls_per_turn + i) % len(self.mix)], seen))
                     for i in range(self.calls_per_turn)]
            turn = ModelTurn(text="", tool_calls=tuple(calls), usage=Usage(1000, 20))
        self.model_s += time.perf_counter() - t
        return turn

    def _call(self, kind: str, seen: list[int]) -> tuple[str, dict]:
        r = self._rng
        query = self.gen.query(r)
        if kind == "search":
            return "search", {"query": query, "k": 8}
        if kind == "search_filtered":
            return "search", {"query": query, "k": 8, "metadata": {"source": "HR"}, "date_after": "2025-06-01"}
        if kind == "search_repeat":
            return "search", {"query": "hotel " + self.gen.words[100], "k": 8}
        if kind == "read":
            return ("read", {"chunk_id": seen[-1], "neighbours": 1}) if seen else ("list_corpora", {})
        if kind == "check_grounding":
            return "check_grounding", {"draft": " ".join(f"Claim about policy [c:{c}]." for c in seen[:4])}
        return kind, {}


SCENARIOS = {
    "search only (hybrid)": (("search",), 3, 3),
    "search, filtered": (("search_filtered",), 3, 3),
    "mixed tools": (("search", "read", "search_repeat", "facets", "list_corpora", "check_grounding", "search_repeat",
                     "search_filtered"), 4, 3),
}


def run_scenario(scope, gen: TextGen, name: str, runs: int) -> dict:
    import agents.services as services
    from agents.budgets import Budgets
    from agents.services import ask

    mix, turns, per_turn = SCENARIOS[name]
    budgets = Budgets(max_tool_calls=100, max_iterations=50, max_tokens=10**6, max_wall_seconds=600)
    write_ms: list[float] = []
    real_record = services.record_run

    def timed_record(**kw):
        t = time.perf_counter()
        try:
            return real_record(**kw)
        finally:
            write_ms.append((time.perf_counter() - t) * 1000)

    from kb import retrieval

    search_s = [0.0]
    real_search = retrieval.search
    inside: dict[str, list[float]] = {}

    def timed_search(*a, **kw):
        t = time.perf_counter()
        try:
            res = real_search(*a, **kw)
            for part, ms in res.timings_ms.items():
                inside.setdefault(part, []).append(ms)
            return res
        finally:
            search_s[0] += time.perf_counter() - t

    services.record_run = timed_record
    retrieval.search = timed_search
    per_call, step_ms, loop_ms, own = [], {}, [], []
    try:
        for i in range(runs):
            provider = ScriptedProvider(mix, turns, per_turn, gen, _rng=random.Random(i))
            steps = []
            search_s[0] = 0.0
            t = time.perf_counter()
            run = ask(scope=scope, question=f"bench question {i}", strategy="agentic", provider=provider, on_step=steps.append,
                      budgets=budgets)
            wall = time.perf_counter() - t
            assert run.outcome in ("answered", "not_enough_evidence"), (run.outcome, run.error)
            n = run.tool_calls
            per_call.append((wall - provider.model_s) * 1000 / n)
            own.append((wall - provider.model_s - search_s[0]) * 1000 / n)
            tool_total = 0.0
            for s in steps:
                if s.kind == "tool_call":
                    key = s.name + (" (cached)" if s.cached else "")
                    step_ms.setdefault(key, []).append(s.latency_ms)
                    tool_total += s.latency_ms
            loop_ms.append(((wall - provider.model_s) * 1000 - tool_total - write_ms[-1]) / n)
    finally:
        services.record_run = real_record
        retrieval.search = real_search
    return {"per_call": per_call, "own": own, "steps": step_ms, "write": write_ms, "loop": loop_ms, "calls": n,
            "inside": inside}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument("--reuse-db", help="A database kept by an earlier --keep-db run: skip loading.")
    args = parser.parse_args()
    dbname = args.reuse_db or f"bench_agents_{os.getpid()}"
    if args.reuse_db:
        use_database(dbname)
    else:
        create_database(dbname)
    try:
        data = reuse(args.rows) if args.reuse_db else load(args.rows)
        from tenants.scope import Scope

        tenant = data["tenant"]
        scopes = {"whole tenant": Scope(tenant_id=tenant.id, all_departments=True, role="reader", principal="bench"),
                  "one department": Scope(tenant_id=tenant.id, department_ids=frozenset({data["depts"][0].id}), role="reader",
                                          principal="bench")}
        print(f"\n{args.rows:,} chunks loaded in {data['load_s']:.1f}s; search vectors + HNSW + VACUUM ANALYZE in {data['index_s']:.1f}s")
        print(f"{args.runs} runs per row; scripted provider (instant); overhead = ask() wall - provider time, per tool call\n")
        header = f"{'scope':<15} {'scenario':<22} {'calls/run':>9} {'p50 ms':>8} {'p95 ms':>8} {'excl. search SQL p50/p95':>25} " \
                 f"{'loop ms':>8} {'write/run':>9} {'< 20 ms':>7}"
        print(header)
        print("-" * len(header))
        detail = {}
        inside = {}
        for scope_name, scope in scopes.items():
            for name in SCENARIOS:
                run_scenario(scope, data["gen"], name, 2)  # warm caches (term statistics, connections)
                r = run_scenario(scope, data["gen"], name, args.runs)
                p50, p95 = percentile(r["per_call"], 0.5), percentile(r["per_call"], 0.95)
                own = f"{percentile(r['own'], 0.5):.2f} / {percentile(r['own'], 0.95):.2f}"
                print(f"{scope_name:<15} {name:<22} {r['calls']:>9} {p50:>8.2f} {p95:>8.2f} {own:>25} "
                      f"{statistics.mean(r['loop']):>8.2f} {percentile(r['write'], 0.5):>9.2f} {'yes' if p95 < 20 else 'NO':>7}")
                for k, v in r["steps"].items():
                    detail.setdefault((scope_name, k), []).extend(v)
                inside[(scope_name, name)] = r["inside"]
        print("\nper tool, all scenarios (ms):")
        print(f"{'scope':<15} {'tool':<20} {'n':>5} {'p50':>8} {'p95':>8}")
        for (scope_name, tool), v in sorted(detail.items()):
            print(f"{scope_name:<15} {tool:<20} {len(v):>5} {percentile(v, 0.5):>8.2f} {percentile(v, 0.95):>8.2f}")
        print("\ninside kb.retrieval.search, per search (timings_ms p50 / p95, ms):")
        parts = ("resolve", "vector", "keyword", "hydrate", "total")
        print(f"{'scope':<15} {'scenario':<22} " + " ".join(f"{p:>13}" for p in parts))
        for (scope_name, name), t in inside.items():
            cells = [f"{percentile(t[p], 0.5):5.2f} / {percentile(t[p], 0.95):5.2f}" if t.get(p) else f"{'-':>13}"
                     for p in parts]
            print(f"{scope_name:<15} {name:<22} " + " ".join(cells))
        print("\np50/p95 ms = per tool call, everything except model time (retrieval SQL and trace write included).")
        print("excl. search SQL = the same without time spent inside kb.retrieval.search (the loop, the other tools, the write).")
        print("loop ms = per call outside every tool and the trace write (dispatch, validation, rendering, citation checks).")
        print("write/run = one transaction: run + steps + citations + chain link, per run (p50).")
    finally:
        if args.keep_db or args.reuse_db:
            print(f"kept database {dbname}")
        else:
            drop_database(dbname)


if __name__ == "__main__":
    main()
