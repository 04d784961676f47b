"""The summarisation set (`manage.py evaluate --summaries N`): "Summarise the document '<title>'"
over the suite's documentation corpora (E-Manual, MTRAG), gold = that document.

Questions are built at run time from the corpus files in ../shared/eval (never copied into the
repository): per set, a seeded sample of N documents whose title is unique in the corpus and whose
text has at least MIN_SENTENCES sentences (a shorter one is its own summary). Each is asked through
the product (agents.services.ask) with the chosen strategies and provider, in the set's evaluation
tenant, and scored:

    cited_gold  a verified citation points into the gold document
    verified    share of the answer's statements (lines or sentences, headings ending in ':' left
                out) whose every citation is verified; a statement without a citation counts as not
    coverage    the document's content-word occurrences (stems, stopwords out) whose word the answer
                holds: ROUGE-1 recall against the whole document
    lead        the same coverage for the document's first sentences, as many as the answer has
                statements: the baseline an extractive summary should beat

Figures per set, strategy and half (bench.evaluation.dataset.half_of of the qid): nothing is tuned
on them; both halves are reported.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.citations import MARKER
from agents.lexical import ordered_terms, sentences, terms
from agents.models import Citation
from agents.services import ask
from bench.evaluation.dataset import CorpusDoc, half_of, load_corpus
from bench.evaluation.environment import run_environment
from bench.evaluation.runner import EvalCorpus, EvaluationError, ensure_corpus
from bench.evaluation.suite import EvalSet, select
from kb.models import Chunk
from tenants.scope import activate

SETS = "emanual,mtrag"
MIN_SENTENCES = 6


@dataclass(frozen=True)
class SummaryQuestion:
    qid: str
    question: str
    doc: CorpusDoc


def summary_questions(set_name: str, docs: list[CorpusDoc], n: int, seed: int) -> list[SummaryQuestion]:
    """A seeded sample of `n` documents with a unique title and at least MIN_SENTENCES sentences."""
    titles = Counter(d.title for d in docs)
    fit = [d for d in docs if titles[d.title] == 1 and len(sentences(d.text)) >= MIN_SENTENCES]
    picked = random.Random(f"{seed}:{set_name}").sample(fit, min(n, len(fit)))
    return [SummaryQuestion(f"summary:{set_name}:{d.doc_id}", f"Summarise the document '{d.title}'", d) for d in picked]


def statements(answer: str) -> list[str]:
    """The answer's statements: each line, cut after every citation group; headings and empty pieces left out."""
    out = []
    for line in answer.splitlines():
        cuts = [0, *(m.end() for m in MARKER.finditer(line)), len(line)]
        for start, end in zip(cuts, cuts[1:], strict=False):
            piece = line[start:end].strip()
            if terms(MARKER.sub("", piece)) and not piece.endswith(":"):
                out.append(piece)
    return out


def verified_share(answer: str, verdicts: list[str]) -> float:
    """Share of statements whose citations (consumed in answer order, as agents.citations numbers them) all verified."""
    pieces = statements(answer)
    if not pieces:
        return 0.0
    queue = list(verdicts)
    ok = 0
    for piece in pieces:
        ids = [i for m in MARKER.finditer(piece) for i in re.findall(r"\d+", m.group(0))]
        mine, queue = queue[: len(ids)], queue[len(ids):]
        ok += bool(ids) and all(v == "verified" for v in mine)
    return ok / len(pieces)


def term_coverage(text: str, document: str) -> float:
    """ROUGE-1 recall of `text` against `document` over content-word stems."""
    counts = Counter(t for s in sentences(document) or [document] for t in ordered_terms(s))
    total = sum(counts.values())
    have = terms(MARKER.sub("", text))
    return sum(c for t, c in counts.items() if t in have) / total if total else 0.0


def score(ev: EvalCorpus, q: SummaryQuestion, strategy: str, provider: str | None) -> dict:
    # Not from the answer cache: the figures are what the engine answers now.
    run = ask(scope=ev.scope, question=q.question, strategy=strategy, provider=provider, use_cache=False)
    with activate(ev.scope):
        cites = list(Citation.objects.for_scope(ev.scope).filter(run_id=run.pk).order_by("ordinal").values_list("chunk_id", "verdict"))
        docs = dict(Chunk.objects.for_scope(ev.scope).filter(pk__in=[c for c, _ in cites]).values_list("pk", "document_id"))
    cited_docs = {ev.doc_keys.get(docs.get(c, -1), "") for c, v in cites if v == "verified"}
    n = len(statements(run.answer))
    return {"qid": q.qid, "half": half_of(q.qid), "strategy": strategy, "outcome": run.outcome,
            "cited_gold": q.doc.doc_id in cited_docs, "verified": verified_share(run.answer, [v for _, v in cites]),
            "coverage": term_coverage(run.answer, q.doc.text),
            "lead": term_coverage(" ".join(sentences(q.doc.text)[: max(n, 1)]), q.doc.text),
            "statements": n, "latency_ms": run.latency_ms}


def aggregate(rows: list[dict]) -> list[dict]:
    """Mean figures per (set, strategy, half), each half and both together ("all")."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        for half in (row["half"], "all"):
            groups.setdefault((row["set"], row["strategy"], half), []).append(row)
    out = []
    for (set_name, strategy, half), members in sorted(groups.items()):
        out.append({"set": set_name, "strategy": strategy, "half": half, "n": len(members),
                    "answered": _mean(r["outcome"] == "answered" for r in members),
                    "cited_gold": _mean(r["cited_gold"] for r in members), "verified": _mean(r["verified"] for r in members),
                    "coverage": _mean(r["coverage"] for r in members), "lead": _mean(r["lead"] for r in members),
                    "statements": _mean(r["statements"] for r in members),
                    "p50_ms": round(statistics.median(r["latency_ms"] for r in members))})
    return out


def _mean(values) -> float:
    values = [float(v) for v in values]
    return round(sum(values) / len(values), 3) if values else 0.0


def markdown_table(figures: list[dict]) -> str:
    head = "| set | strategy | half | n | answered | cited gold | verified statements | coverage | lead coverage | statements | p50 ms |\n"
    head += "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    return head + "".join(
        f"| {f['set']} | {f['strategy']} | {f['half']} | {f['n']} | {f['answered']:.3f} | {f['cited_gold']:.3f} | {f['verified']:.3f} "
        f"| {f['coverage']:.3f} | {f['lead']:.3f} | {f['statements']:.1f} | {f['p50_ms']} |\n" for f in figures)


def evaluate_summaries(sets: list[EvalSet], *, n: int, strategies: list[str], provider: str | None, seed: int,
                       log) -> dict:
    rows: list[dict] = []
    for eval_set in sets:
        if eval_set.missing():
            log(f"summaries: set {eval_set.name} skipped, its files are absent")
            continue
        docs = load_corpus(eval_set.corpus)
        log(f"summaries: set {eval_set.name}: ingesting or reusing {len(docs)} documents")
        ev = ensure_corpus(docs, tenant_slug=eval_set.tenant, corpus_name=eval_set.corpus_name, profile=eval_set.profile)
        for q in summary_questions(eval_set.name, docs, n, seed):
            for strategy in strategies:
                rows.append({"set": eval_set.name, **score(ev, q, strategy, provider)})
    return {"meta": {"sets": [s.name for s in sets], "per_set": n, "strategies": strategies, "provider": provider or "default",
                     "seed": seed, "min_sentences": MIN_SENTENCES},
            "figures": aggregate(rows), "records": [{k: v for k, v in r.items()} for r in rows]}


def run_summaries_command(command: BaseCommand, opts: dict, strategies: list[str]) -> None:
    """`manage.py evaluate --summaries N [--sets emanual,mtrag]`: writes --out/summaries/report.{json,md}."""
    started = time.perf_counter()
    try:
        sets = select(opts["sets"] or SETS)
        report = evaluate_summaries(sets, n=opts["summaries"], strategies=strategies, provider=opts["provider"],
                                    seed=opts["seed"], log=command.stderr.write)
    except (EvaluationError, ValueError) as exc:
        raise CommandError(str(exc)) from exc
    report["meta"].update({"command": "manage.py " + " ".join(sys.argv[1:]), "elapsed_s": round(time.perf_counter() - started, 1),
                           "finished_at": datetime.now(UTC).isoformat(timespec="seconds"), "environment": run_environment()})
    out: Path = opts["out"] / "summaries"
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(report["figures"])
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(f"# Summarisation set\n\n`{report['meta']['command']}`\n\n{table}", encoding="utf-8")
    command.stdout.write(table)
    command.stderr.write(f"wrote {out / 'report.json'} and {out / 'report.md'}")
