"""Ingestion throughput: the real pipeline with a local model vs. the model alone.

    .venv/bin/python bench/ingest_bench.py [--chunks 2000] [--corpus ../shared/eval/corpus.jsonl] [--model-key minilm-l6-v2:384]

--model-key is the corpus's embedding model (default MiniLM fp32, on GROUNDED_EMBED_BACKEND's
runtime; `minilm-l6-v2-int8:384` for the ONNX int8 model).

Uploads news articles (../shared/eval/corpus.jsonl; a generated corpus when it is absent) through
`kb.ingest.upload_document` into a scratch database on the embedded PostgreSQL, in groups of
GROUNDED_INGEST_GROUP (32) files per transaction as a multi-file API upload does, in eager mode
(no broker: after each group's commit its jobs run in this process, as one worker would run them).
Then it embeds the same chunk texts with the model alone, at the same batch size, and prints
chunks/s for both and the ratio (target: pipeline <= 1.25x model).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB_NAME = "grounded_bench_ingest"


def setup_django() -> None:
    for var in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(var, None)  # eager mode on the embedded server
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
    os.environ["GROUNDED_DB_NAME"] = DB_NAME
    os.environ["GROUNDED_EMBEDDER"] = "local"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    owner = connections["owner"]
    with owner._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{DB_NAME}"')
    for alias in ("owner", "default"):
        connections[alias].close()
    call_command("migrate", database="owner", verbosity=0)


def drop_database() -> None:
    from django.db import connections

    for alias in ("owner", "default"):
        connections[alias].close()
    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


def load_articles(path: Path, limit: int) -> list[dict]:
    if path.exists():
        with path.open() as f:
            return [json.loads(line) for _, line in zip(range(limit), f, strict=False)]
    print(f"({path} not found: using a generated corpus)")
    rng = random.Random(7)
    words = [w for w in ("policy employee travel hotel expense manager approval receipt budget contract customer data "
                         "security laptop office remote leave holiday salary training safety incident report audit "
                         "vendor invoice payment deadline quarter review meeting project team").split()]
    return [{"doc_id": f"gen-{i:04d}", "title": f"Generated article {i}", "published_at": "2024-01-01",
             "text": "\n\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(40, 90))).capitalize() + "."
                                 for _ in range(rng.randint(8, 20)))}
            for i in range(limit)]


def article_bytes(article: dict) -> bytes:
    return f"# {article['title']}\n\n{article['text']}".encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=2000, help="ingest articles until at least this many chunks")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "eval" / "corpus.jsonl"))
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--model-key", default="minilm-l6-v2:384", help="the corpus's local embedding model")
    args = parser.parse_args()

    setup_django()
    from django.db import transaction

    from kb import embedding, ingest
    from kb.chunking import chunk_document
    from kb.models import Chunk, Corpus
    from kb.parsing import parse
    from tenants.models import Tenant
    from tenants.scope import Scope, activate

    embedder = embedding.get_embedder(args.model_key)
    embedder_class = type(embedder)
    batch = ingest.embed_batch_size()
    embedder.embed(["warm up the model and the tokenizer"])  # load once, outside every timing

    # Choose the articles (outside the timing): enough for --chunks with the pipeline's own chunker.
    articles, texts_of = [], []
    for article in load_articles(Path(args.corpus), 10_000):
        parsed = parse(article_bytes(article), f"{article['doc_id']}.md")
        spans = chunk_document(parsed, target_tokens=200, overlap_tokens=30,
                               max_tokens=embedder.max_tokens - embedder.reserved_tokens, count_tokens=embedder.count_tokens)
        articles.append(article)
        texts_of.append([s.text for s in spans])
        if sum(map(len, texts_of)) >= args.chunks:
            break
    unique_texts = list(dict.fromkeys(t for texts in texts_of for t in texts))

    def model_only(texts: list[str]) -> float:
        """The model alone on the same texts at the same batch size."""
        start = time.perf_counter()
        for i in range(0, len(texts), batch):
            embedder.embed_array(texts[i:i + batch])
        return time.perf_counter() - start

    in_model = [0.0]  # time the pipeline spends inside the model, measured on the side
    original = embedder_class.embed_array

    def timed(self, texts, task="document"):
        start = time.perf_counter()
        try:
            return original(self, texts, task)
        finally:
            in_model[0] += time.perf_counter() - start

    tenant = Tenant.objects.create(name="Bench", slug="bench")
    scope = Scope.system(tenant.id, principal="bench")
    with activate(scope):
        name, _, dim = args.model_key.partition(":")
        corpus = Corpus.objects.create(tenant=tenant, name="News", embedding_model=name, embedding_dim=int(dim))  # 200/30 tokens

    # Pipeline and model-only runs alternate group by group (and swap order each time), so a
    # machine shared with other work slows both alike instead of skewing the ratio.
    group = ingest.group_max_jobs()
    pipeline = model = 0.0
    seen: set[str] = set()
    for n, first in enumerate(range(0, len(articles), group)):
        members = range(first, min(first + group, len(articles)))
        fresh = list(dict.fromkeys(t for i in members for t in texts_of[i] if t not in seen))
        seen.update(fresh)

        def run_pipeline(members=members) -> float:
            embedder_class.embed_array = timed
            start = time.perf_counter()
            # Like one multi-file API upload (or ingest_folder): the group's jobs start after its
            # commit, and the first one embeds them all in full batches.
            with transaction.atomic():
                for i in members:
                    a = articles[i]
                    ingest.upload_document(scope=scope, corpus=corpus, filename=f"{a['doc_id']}.md", data=article_bytes(a),
                                           title=a["title"], metadata={"published_at": a.get("published_at", "")})
            elapsed = time.perf_counter() - start
            embedder_class.embed_array = original
            return elapsed

        if n % 2 == 0:
            pipeline += run_pipeline()
            model += model_only(fresh)
        else:
            model += model_only(fresh)
            pipeline += run_pipeline()

    with activate(scope):
        written = Chunk.objects.for_scope(scope).filter(corpus=corpus).count()
        ready = corpus.documents.model.objects.for_scope(scope).filter(corpus=corpus, status="ready").count()
    rows = [
        ("articles ingested (ready)", f"{ready}/{len(articles)}"),
        ("chunks written", f"{written} ({len(unique_texts)} distinct texts)"),
        ("batch size / documents per upload group", f"{batch} / {ingest.group_max_jobs()}"),
        ("model only: seconds", f"{model:.1f}"),
        ("model only: chunks/s", f"{len(unique_texts) / model:.1f}"),
        ("pipeline end to end: seconds", f"{pipeline:.1f}"),
        ("pipeline end to end: chunks/s", f"{written / pipeline:.1f}"),
        ("  of which inside the model: seconds", f"{in_model[0]:.1f}"),
        ("  of which parse+chunk+DB+bookkeeping: seconds", f"{pipeline - in_model[0]:.1f}"),
        ("ratio pipeline / model only (target <= 1.25)", f"{pipeline / model:.3f}"),
        ("ratio pipeline / its own model time", f"{pipeline / in_model[0]:.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\nIngestion benchmark: {embedder.model_key} ({getattr(embedder, 'runtime', '?')}, CPU, {os.cpu_count()} cores), "
          f"eager mode, embedded PostgreSQL; load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print("-" * (width + 30))
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if not args.keep:
        drop_database()


if __name__ == "__main__":
    main()
