"""A corpus file round trip measured on a real corpus: HotpotQA dev (1,617 Wikipedia paragraphs) ingested
with the real MiniLM into one tenant, exported (kb.transfer), imported into another tenant, and the
same queries searched in both.

    .venv/bin/python bench/corpus_roundtrip.py [--queries 50] [--sentence-vectors] [--out /tmp/roundtrip.json]

Prints (and writes as JSON): the file's size with and without the original bytes, export and import
times, how many vectors the import embedded (the target tenant's embedding cache, which every
ingestion or re-embed fills: 0 means none), and per search mode how many of the queries gave
identical results in both tenants (same texts in the same order, scores within 1e-6). Runs on a
throwaway database of the embedded PostgreSQL (bench.benchdb), dropped at the end. Skips (exit 0)
when ../shared/eval/hotpotqa is absent, as it is in user clones. Figures: docs/export.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB_NAME = "grounded_bench_roundtrip"
MODES = (("hybrid+rerank", "hybrid", True), ("hybrid", "hybrid", False), ("vector", "vector", False),
         ("keyword", "keyword", False))


def main() -> int:
    from bench.evaluation.suite import SHARED_EVAL

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=SHARED_EVAL / "hotpotqa" / "corpus.jsonl")
    parser.add_argument("--questions", type=Path, default=SHARED_EVAL / "hotpotqa" / "questions.jsonl")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--embedding-model", default="minilm-l6-v2:384",
                        help="the corpus's model ('<model>:<dim>'; it is made this installation's default for the run)")
    parser.add_argument("--sentence-vectors", action="store_true",
                        help="also embed every sentence (about 4x the embedding work on this corpus)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    args = parser.parse_args()
    missing = [p for p in (args.corpus, args.questions) if not p.is_file()]
    if missing:
        print(f"skipped: {', '.join(map(str, missing))} absent (the shared evaluation folder is not in user clones)")
        return 0
    for var in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(var, None)  # eager mode on the embedded server
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
    os.environ["GROUNDED_EMBEDDER"] = args.embedding_model
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
    from bench.benchdb import create_database, drop_database

    create_database(DB_NAME)
    try:
        figures = measure(args)
    finally:
        drop_database(DB_NAME)
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if all(m["identical"] == figures["queries"] for m in figures["modes"].values()) else 1


def in_upload_groups(items: Iterable) -> Iterator:
    """ensure_corpus's uploads, a group of GROUNDED_INGEST_GROUP documents per transaction, as one
    multi-file upload: the group's jobs run after its commit and the first embeds them all in full
    batches (one upload per transaction embeds one paragraph per model call, several times slower)."""
    from django.db import transaction

    from kb.ingest import group_max_jobs

    size = max(1, group_max_jobs())
    docs = list(items)
    for first in range(0, len(docs), size):
        with transaction.atomic():
            yield from docs[first:first + size]


def measure(args: argparse.Namespace) -> dict:
    import numpy as np

    from bench.evaluation.dataset import load_corpus, load_questions
    from bench.evaluation.runner import ensure_corpus
    from bench.evaluation.suite import ENCYCLOPEDIA
    from kb.models import Corpus, EmbeddingCache
    from kb.retrieval import SearchFilters, search
    from kb.transfer import export_corpus, import_corpus
    from tenants.models import Tenant
    from tenants.scope import Scope, activate

    docs = load_corpus(args.corpus)
    questions = load_questions(args.questions, docs)[: args.queries]
    t = time.perf_counter()
    source = ensure_corpus(docs, tenant_slug="roundtrip-source", corpus_name="hotpotqa", profile=ENCYCLOPEDIA,
                           sentence_vectors=args.sentence_vectors, embedding_model=args.embedding_model,
                           progress=in_upload_groups)
    ingest_s = time.perf_counter() - t
    with activate(source.scope):
        corpus = Corpus.objects.for_scope(source.scope).get(pk=source.corpus_id)
    sizes = {}
    for with_bytes in (False, True):
        out = io.BytesIO()
        t = time.perf_counter()
        summary = export_corpus(scope=source.scope, corpus=corpus, out=out, include_bytes=with_bytes)
        sizes["with_bytes" if with_bytes else "without_bytes"] = {"bytes": len(out.getvalue()), "export_s": time.perf_counter() - t}
        data = out.getvalue()  # the last one (with the original bytes) is imported
    target = Scope.system(Tenant.objects.create(slug="roundtrip-target", name="Round trip target").id, principal="bench")
    t = time.perf_counter()
    result = import_corpus(scope=target, stream=io.BytesIO(data))
    import_s = time.perf_counter() - t
    t = time.perf_counter()
    again = import_corpus(scope=target, stream=io.BytesIO(data))
    again_s = time.perf_counter() - t
    with activate(target):
        embedded = EmbeddingCache.objects.for_scope(target).count()
    modes = {}
    for label, mode, rerank in MODES:
        identical, worst = 0, 0.0
        for q in questions:
            a = search(source.scope, q.question, k=args.k, mode=mode, rerank=rerank,  # type: ignore[arg-type]
                       filters=SearchFilters(corpus_ids=(source.corpus_id,))).hits
            b = search(target, q.question, k=args.k, mode=mode, rerank=rerank,  # type: ignore[arg-type]
                       filters=SearchFilters(corpus_ids=(result.corpus_id,))).hits
            diff = max((abs(x.score - y.score) for x, y in zip(a, b, strict=False)), default=0.0)
            same = [(h.document_title, h.text) for h in a] == [(h.document_title, h.text) for h in b] and diff <= 1e-6
            identical += same
            worst = max(worst, diff)
        modes[label] = {"identical": identical, "max_score_difference": float(np.float64(worst))}
    return {"corpus": str(args.corpus), "sentence_vectors": args.sentence_vectors, "documents": summary.documents, "chunks": summary.chunks,
            "sentences": summary.sentences, "model": summary.model_key, "ingest_s": round(ingest_s, 1),
            "file": sizes, "import_s": round(import_s, 2), "second_import": again.describe(), "second_import_s": round(again_s, 2),
            "vectors_embedded_by_import": embedded, "queries": len(questions), "k": args.k, "modes": modes}


if __name__ == "__main__":
    raise SystemExit(main())
