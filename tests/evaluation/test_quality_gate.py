"""CI quality gate: fixed-seed subsets of both suite sets through the real pipeline and the agent.

MultiHop-RAG (news): questions of each type (seed 7, so the null slice is large enough to
measure); the corpus is their evidence documents plus a fixed sample of distractors. HotpotQA
(Wikipedia): bridge, comparison and null questions (seed 7); the corpus is their gold paragraphs
plus, per question, the paragraphs of the pooled corpus that share the most rare words with it,
which rebuilds HotpotQA's distractor setting (its distractors were retrieved by TF-IDF against the
question), so a null question's neighbours name the same people and things. Both are ingested with
the real MiniLM embedder and each set's corpus profile from the suite registry. Thresholds sit a few
points under the values measured on these exact subsets, so a real regression fails and noise does
not; nothing here is timed. Skips a set whose files in ../shared/eval are absent.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections import Counter

import pytest

from bench.evaluation.dataset import CorpusDoc, Question, evidence_doc_ids, load_corpus, load_questions, sample_questions
from bench.evaluation.runner import ensure_corpus, facet_sources, run_one
from bench.evaluation.suite import select
from bench.evaluation.summary import summarise

SEED = 7
STRATEGIES = ("classic", "auto", "pipeline")
MULTIHOP, HOTPOT = select("multihop-rag-dev,hotpotqa")

# MultiHop-RAG: 15 questions of each type, their evidence documents + 30 fixed distractors (104 documents).
MH_PER_TYPE = 15
MH_DISTRACTORS = 30
# HotpotQA: 12 bridge, 8 comparison, 10 null questions; gold paragraphs + the 5 nearest paragraphs per question.
HP_PER_TYPE = {"bridge": 12, "comparison": 8, "null_query": 10}
HP_NEIGHBOURS = 5

# Measured on these subsets (offline provider, MiniLM, sentence vectors, each set's profile), recall / all facts /
# Hits@10 / null declined / answer containment; auto and the pipeline gave the same figures each time:
#   at a340369 (2026-12-03 14:52 UTC), the floors below are about 0.05 under these:
#     multihop-rag-dev  classic 0.578 / 0.311 / 0.844 / 1.000 / 0.133, auto 0.739 / 0.467 / 0.956 / 1.000 / 0.200
#     hotpotqa          classic, auto 0.975 / 0.950 / 1.000 / 0.500 / 0.700
#   at 271b9ef (14:16 UTC; MultiHop-RAG nulls had regressed from 0.867-0.933 on the earlier engine):
#     multihop-rag-dev  classic 0.578 / 0.311 / 0.844 / 0.533 / 0.333, auto 0.739 / 0.467 / 0.956 / 0.467 / 0.311
#     hotpotqa          classic 0.975 / 0.950 / 1.000 / 0.300 / 0.450, auto 0.950 / 0.900 / 1.000 / 0.300 / 0.450
#   at 9221fe1 (15:30 UTC), the HotpotQA part alone: classic, auto 0.975 / 0.950 / 1.000 / 0.700 / 0.650; and the whole
#   gate at 380174e (15:26 UTC): the same figures, MultiHop-RAG as at a340369 (containment 0.111 classic, 0.178 auto);
#   the containment floor is 0.05 under 0.650 like the others
# Issue 28's targets are higher still (MultiHop-RAG nulls declined >= 0.95; HotpotQA recall >= 0.97, all facts
# >= 0.94, nulls >= 0.85, containment >= 0.75; no strategy under classic).
THRESHOLDS = {
    "multihop-rag-dev": {
        "classic": {"evidence_recall": 0.52, "all_facts": 0.26, "hits_at_10": 0.79, "null_abstained": 0.93},
        "auto": {"evidence_recall": 0.69, "all_facts": 0.41, "hits_at_10": 0.90, "null_abstained": 0.93},
        "pipeline": {"evidence_recall": 0.69, "all_facts": 0.41, "hits_at_10": 0.90, "null_abstained": 0.93},
    },
    "hotpotqa": {
        "classic": {"evidence_recall": 0.92, "all_facts": 0.90, "hits_at_10": 0.95, "null_abstained": 0.45, "answer_containment": 0.60},
        "auto": {"evidence_recall": 0.92, "all_facts": 0.90, "hits_at_10": 0.95, "null_abstained": 0.45, "answer_containment": 0.60},
        "pipeline": {"evidence_recall": 0.92, "all_facts": 0.90, "hits_at_10": 0.95, "null_abstained": 0.45, "answer_containment": 0.60},
    },
}
# On MultiHop-RAG multi-step retrieval must keep beating one-shot retrieval at the same context size
# (measured margin: 0.16 for auto and the pipeline, at both commits above).
MIN_MULTI_STEP_MARGIN = {"multihop-rag-dev": 0.12}
MIN_VERIFIED_CITATIONS = 0.9
METRICS_SHOWN = ("evidence_recall", "all_facts", "hits_at_10", "hits_at_4", "null_abstained", "answer_containment",
                 "answer_precision", "citations_verified_share")

pytestmark = [pytest.mark.quality_gate, pytest.mark.django_db(databases=["default", "owner"])]


def multihop_subset() -> tuple[list[CorpusDoc], list[Question]]:
    docs = load_corpus(MULTIHOP.corpus)
    everything = load_questions(MULTIHOP.questions, docs)
    questions = [q for t in sorted({q.question_type for q in everything})
                 for q in sample_questions([q for q in everything if q.question_type == t], limit=MH_PER_TYPE, seed=SEED)]
    needed = evidence_doc_ids(questions)
    others = sorted(d.doc_id for d in docs if d.doc_id not in needed)
    keep = needed | set(random.Random(SEED).sample(others, MH_DISTRACTORS))
    return [d for d in docs if d.doc_id in keep], questions


_WORD = re.compile(r"\w{3,}")


def _words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def nearest(question: str, docs: list[CorpusDoc], n: int, df: Counter) -> list[str]:
    """The n documents sharing the most rare words (sum of idf) with the question, ties by doc id."""
    asked = _words(question)
    scored = [(-sum(math.log(len(docs) / df[w]) for w in asked & _words(f"{d.title} {d.text}")), d.doc_id) for d in docs]
    return [doc_id for _, doc_id in sorted(scored)[:n]]


def hotpot_subset() -> tuple[list[CorpusDoc], list[Question]]:
    docs = load_corpus(HOTPOT.corpus)
    everything = load_questions(HOTPOT.questions, docs)
    questions = [q for t, count in HP_PER_TYPE.items()
                 for q in sample_questions([q for q in everything if q.question_type == t], limit=count, seed=SEED)]
    df = Counter(w for d in docs for w in _words(f"{d.title} {d.text}"))
    keep = evidence_doc_ids(questions) | {doc_id for q in questions for doc_id in nearest(q.question, docs, HP_NEIGHBOURS, df)}
    return [d for d in docs if d.doc_id in keep], questions


def _run(eval_set, subset, corpus_name: str, strategies: tuple[str, ...] = STRATEGIES) -> dict:
    started = time.perf_counter()
    docs, questions = subset()
    ev = ensure_corpus(docs, tenant_slug=f"quality-gate-{eval_set.name}", corpus_name=corpus_name, profile=eval_set.profile)
    ingested = time.perf_counter()
    sources = facet_sources(ev)
    results = [run_one(ev, q, s, provider="offline", generates_text=False, sources=sources) for q in questions for s in strategies]
    print(f"{eval_set.name}: {len(docs)} documents ingested in {ingested - started:.0f} s, "
          f"{len(results)} runs in {time.perf_counter() - ingested:.0f} s")
    assert not [r.error for r in results if r.error]
    summary = summarise(results)
    for strategy in strategies:  # shown on failure (and with -s): the figures to re-set thresholds from
        print(eval_set.name, strategy, {k: round(v, 3) for k, v in summary[strategy]["all"].items()
                                        if k in METRICS_SHOWN and v is not None})
    return summary


def _check(name: str, summary: dict) -> list[str]:
    failures = []
    for strategy, floors in THRESHOLDS[name].items():
        figures = summary[strategy]["all"]
        failures += [f"{name} {strategy} {metric} = {figures[metric]:.3f} fell below {floor}"
                     for metric, floor in floors.items() if figures[metric] < floor]
    for strategy in STRATEGIES:
        share = summary[strategy]["all"]["citations_verified_share"]
        if share is not None and share < MIN_VERIFIED_CITATIONS:
            failures.append(f"{name} {strategy}: only {share:.2f} of citations verified")
    if name in MIN_MULTI_STEP_MARGIN:
        classic = summary["classic"]["all"]["evidence_recall"]
        for strategy in ("auto", "pipeline"):
            recall = summary[strategy]["all"]["evidence_recall"]
            if recall <= classic + MIN_MULTI_STEP_MARGIN[name]:
                failures.append(f"{name} {strategy} recall {recall:.3f} is not {MIN_MULTI_STEP_MARGIN[name]} over classic {classic:.3f}")
    return failures


SETS = {"multihop-rag-dev": (MULTIHOP, multihop_subset, "multihop-subset"), "hotpotqa": (HOTPOT, hotpot_subset, "hotpotqa-subset")}
# The HotpotQA subset once more with the packaged cross-encoder judging (GROUNDED_RELEVANCE_MODEL=packaged, the
# product's default; the floors above hold the word rules alone), auto only. Measured at fc789c0 (30 runs, 19 s):
# recall 0.975, all facts 0.95, Hits@10 1.000, null declined 0.500 (0.800 without the model: the subset's nulls are
# bridge questions whose remaining hop's paragraph the model reads as an answer), containment 0.750; floors ~0.05 under.
JUDGED_FLOORS = {"evidence_recall": 0.92, "hits_at_10": 0.95, "null_abstained": 0.45, "answer_containment": 0.70}


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_quality_gate(settings, set_name):
    """One set per test, so parallel workers run the sets side by side; all of a set's figures are
    computed before any assertion, so one failure shows every figure."""
    settings.DEFAULT_EMBEDDER = "local"  # the real MiniLM, as in production (conftest defaults to the hash embedder)
    eval_set, subset, corpus_name = SETS[set_name]
    if eval_set.missing():
        pytest.skip(f"../shared/eval has no {set_name}")
    failures = _check(eval_set.name, _run(eval_set, subset, corpus_name))
    assert not failures, "\n".join(failures)


def test_quality_gate_with_the_relevance_judge(settings, monkeypatch):
    """The HotpotQA subset answered by `auto` with the packaged cross-encoder reranking and judging."""
    settings.DEFAULT_EMBEDDER = "local"
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", "packaged")
    if HOTPOT.missing():
        pytest.skip("../shared/eval has no hotpotqa")
    figures = _run(HOTPOT, hotpot_subset, "hotpotqa-subset", strategies=("auto",))["auto"]["all"]
    failures = [f"judged auto {metric} = {figures[metric]:.3f} fell below {floor}"
                for metric, floor in JUDGED_FLOORS.items() if figures[metric] < floor]
    assert not failures, "\n".join(failures)
