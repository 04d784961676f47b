"""Local embedding runtimes side by side: torch fp32, ONNX Runtime fp32 and ONNX Runtime int8.

    .venv/bin/python bench/embedding_bench.py [--model minilm|mpnet] [--chunks 1000] [--corpus ../shared/eval/corpus.jsonl]

Chunks real articles (../shared/eval/corpus.jsonl, the MultiHop-RAG corpus, kept outside the
repository; a generated corpus when it is absent, and then the cosine figures are not about real
text) with the product's chunker and the model's own token counts, takes the first --chunks
distinct chunks, and embeds them with each runtime at the same batch size (GROUNDED_EMBED_BATCH)
and the same thread count (the machine's cores). The runs alternate slice by slice, rotating the
order, so a machine shared with other work slows all of them alike; the ratios are the figures to
read. Prints chunks/s and CPU seconds, their ratios to torch fp32, and the cosine of each chunk's vector to its
torch fp32 vector (mean, 1st percentile, min), with the load average before and after.
`--estimate-corpus` also chunks the whole corpus and states the model time each runtime would
need for all its chunks at the measured rate (an extrapolation: sentence vectors add more work).
The ONNX graphs are exported into GROUNDED_ONNX_DIR on first use (outside the timings).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("minilm", "mpnet"), default="minilm")
    parser.add_argument("--chunks", type=int, default=1000, help="distinct chunks to embed with each runtime")
    parser.add_argument("--slices", type=int, default=4, help="alternation rounds")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "eval" / "corpus.jsonl"))
    parser.add_argument("--estimate-corpus", action="store_true", help="extrapolate the model time of the whole corpus's chunks")
    args = parser.parse_args()

    import django

    django.setup()
    import torch  # the torch runtime's threads: as many as ONNX Runtime's
    from ingest_bench import article_bytes, load_articles

    from kb.chunking import chunk_document
    from kb.embedding import RUNTIMES, LocalMiniLMEmbedder
    from kb.parsing import parse
    from tenants.conf.environment import get_int

    if args.model == "mpnet":
        from kb.mpnet import MPNetEmbedder as cls
    else:
        cls = LocalMiniLMEmbedder
    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    os.environ.setdefault("GROUNDED_ONNX_THREADS", str(cores))
    batch = get_int("GROUNDED_EMBED_BATCH")
    embedders = {runtime: cls(batch_size=batch, runtime=runtime) for runtime in RUNTIMES}
    reference = embedders["torch"]
    load_before = loadavg()
    for embedder in embedders.values():  # load / export once, outside every timing
        embedder.embed_array(["warm up the model and the tokenizer"])

    def chunks_of(article: dict) -> list[str]:
        spans = chunk_document(parse(article_bytes(article), f"{article['doc_id']}.md"), target_tokens=200, overlap_tokens=30,
                               max_tokens=reference.max_tokens - reference.reserved_tokens, count_tokens=reference.count_tokens)
        return [s.text for s in spans]

    articles = load_articles(Path(args.corpus), 100_000)
    texts: list[str] = []
    for article in articles:
        texts.extend(chunks_of(article))
        texts = list(dict.fromkeys(texts))
        if len(texts) >= args.chunks:
            break
    texts = texts[:args.chunks]

    seconds = dict.fromkeys(RUNTIMES, 0.0)
    cpu = dict.fromkeys(RUNTIMES, 0.0)  # process CPU time, all threads: steadier than wall time on a busy machine
    vectors: dict[str, list[np.ndarray]] = {runtime: [] for runtime in RUNTIMES}
    size = -(-len(texts) // args.slices)
    for n, start in enumerate(range(0, len(texts), size)):
        part = texts[start:start + size]
        order = RUNTIMES[n % len(RUNTIMES):] + RUNTIMES[:n % len(RUNTIMES)]
        for runtime in order:
            began, began_cpu = time.perf_counter(), time.process_time()
            for i in range(0, len(part), batch):
                vectors[runtime].append(embedders[runtime].embed_array(part[i:i + batch]))
            seconds[runtime] += time.perf_counter() - began
            cpu[runtime] += time.process_time() - began_cpu
    stacked = {runtime: np.concatenate(v) for runtime, v in vectors.items()}
    load_after = loadavg()

    print(f"\nEmbedding runtimes: {reference.base_name}, {len(texts)} real chunks "
          f"({'from ' + args.corpus if Path(args.corpus).exists() else 'GENERATED corpus'}), batch {batch}, "
          f"{cores} threads, {args.slices} alternating slices")
    print(f"load average before {load_before}, after {load_after}")
    header = (f"{'runtime':<10} {'model key':<26} {'seconds':>8} {'chunks/s':>9} {'x torch':>8} {'CPU s':>7} {'x torch CPU':>11} "
              f"{'cos mean':>9} {'cos p1':>8} {'cos min':>8}")
    print(header)
    print("-" * len(header))
    rates = {}
    for runtime in RUNTIMES:
        cos = (stacked[runtime] * stacked["torch"]).sum(axis=1)
        rates[runtime] = len(texts) / seconds[runtime]
        print(f"{runtime:<10} {embedders[runtime].model_key:<26} {seconds[runtime]:>8.1f} {rates[runtime]:>9.2f} "
              f"{seconds['torch'] / seconds[runtime]:>8.2f} {cpu[runtime]:>7.1f} {cpu['torch'] / cpu[runtime]:>11.2f} "
              f"{cos.mean():>9.5f} {np.percentile(cos, 1):>8.5f} {cos.min():>8.5f}")

    if args.estimate_corpus:
        total = sum(len(chunks_of(a)) for a in articles)
        print(f"\nWhole corpus: {len(articles)} articles, {total} chunks. Model time for them at the rates above "
              "(extrapolated, chunk vectors only):")
        for runtime in RUNTIMES:
            minutes = total / rates[runtime] / 60
            print(f"  {runtime:<10} {minutes:>7.1f} min  ({len(articles) / minutes:.1f} articles/min)")


if __name__ == "__main__":
    main()
