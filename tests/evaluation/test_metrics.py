"""Metric code on hand-made data with known answers (no database)."""

from __future__ import annotations

import pytest

from agents.evaluation.metrics import (
    ContextChunk,
    GoldItem,
    evidence_recall,
    lenient_correct,
    percentile,
    retrieval_scores,
    strict_correct,
)
from agents.evaluation.summary import QuestionResult, judge_answer, summarise

FACT_A = "The board removed the chief executive on Friday."
FACT_B = "Revenue rose 12 percent in the third quarter."
FACT_C = "The stadium holds 60,000 people."


def chunk(text: str, doc: str = "") -> ContextChunk:
    return ContextChunk(text=text, doc_key=doc)


def test_relevance_ignores_spaces_and_newlines_like_the_official_script():
    reflowed = "Preamble. The board removed the chief\nexecutive  on Friday. More."
    scores = retrieval_scores([chunk(reflowed)], [GoldItem(FACT_A)])
    assert scores.hits_at_10 == 1.0
    # Case and punctuation are not normalised by the official script.
    assert retrieval_scores([chunk(FACT_A.lower())], [GoldItem(FACT_A)]).hits_at_10 == 0.0


def test_hits_mrr_map_on_a_known_ranking():
    # Relevant chunks at ranks 2 (fact A) and 5 (facts B and C); two facts of three... all three found.
    ranked = [chunk("noise"), chunk(FACT_A), chunk("noise"), chunk("noise"), chunk(f"{FACT_B} {FACT_C}"), chunk("noise")]
    s = retrieval_scores(ranked, [GoldItem(FACT_A), GoldItem(FACT_B), GoldItem(FACT_C)])
    assert (s.hits_at_4, s.hits_at_10) == (1.0, 1.0)
    assert s.mrr_at_10 == pytest.approx(1 / 2)
    # Official MAP: sum over relevant ranks of (new facts there / rank) / min(#facts, 10) = (1/2 + 2/5) / 3.
    assert s.map_at_10 == pytest.approx((1 / 2 + 2 / 5) / 3)
    assert s.evidence_recall == 1.0


def test_only_the_first_ten_chunks_count_and_hits_at_4_needs_the_top_four():
    ranked = [chunk("noise")] * 4 + [chunk(FACT_A)] + [chunk("noise")] * 5 + [chunk(FACT_B)]
    s = retrieval_scores(ranked, [GoldItem(FACT_A), GoldItem(FACT_B)])
    assert (s.hits_at_4, s.hits_at_10, s.mrr_at_10) == (0.0, 1.0, pytest.approx(1 / 5))
    assert s.evidence_recall == 0.5  # FACT_B sits at rank 11


def test_a_fact_seen_again_lower_down_adds_nothing_to_map():
    s = retrieval_scores([chunk(FACT_A), chunk(FACT_A)], [GoldItem(FACT_A), GoldItem(FACT_B)])
    assert s.map_at_10 == pytest.approx(1 / 2)
    assert s.mrr_at_10 == 1.0


def test_duplicate_gold_facts_count_once_found_but_twice_in_the_map_denominator():
    # The official script divides by min(len(gold), 10) including duplicates.
    s = retrieval_scores([chunk(FACT_A)], [GoldItem(FACT_A), GoldItem(FACT_A)])
    assert s.map_at_10 == pytest.approx(1 / 2)
    assert s.evidence_recall == 1.0  # recall is over distinct facts


def test_no_relevant_chunk_scores_zero_and_empty_gold_is_refused():
    s = retrieval_scores([chunk("noise")], [GoldItem(FACT_A)])
    assert (s.hits_at_4, s.hits_at_10, s.mrr_at_10, s.map_at_10, s.evidence_recall) == (0, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        retrieval_scores([chunk(FACT_A)], [])


def test_expected_source_without_fact_matches_any_chunk_of_that_document():
    gold = [GoldItem(doc_key="handbook"), GoldItem(doc_key="travel")]
    assert evidence_recall([chunk("anything", "handbook"), chunk("other", "misc")], gold) == 0.5
    assert retrieval_scores([chunk("x", "misc"), chunk("y", "travel")], gold).mrr_at_10 == pytest.approx(1 / 2)


def test_lenient_accuracy_is_one_shared_lowercase_word():
    assert lenient_correct("I think the answer is sam altman.", "Sam Altman")
    assert lenient_correct('The answer to the question is "Yes"', "yes")
    assert not lenient_correct("Nobody knows", "Sam Altman")


def test_strict_accuracy_needs_the_normalised_answer_itself():
    assert strict_correct("Sam Altman.", "Sam Altman")
    assert strict_correct('The answer to the question is "the Minnesota Vikings"', "Minnesota Vikings")
    assert strict_correct("Yes. Both reports say so.", "yes")
    assert not strict_correct("Sam Altman and Greg Brockman", "Sam Altman")


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10, 20, 30, 40, 50], 95) == pytest.approx(48.0)
    assert percentile([], 50) is None


def test_summary_splits_by_type_and_applies_each_figure_where_it_belongs():
    s_hit = retrieval_scores([chunk(FACT_A)], [GoldItem(FACT_A), GoldItem(FACT_B)])
    results = [
        QuestionResult("q1", "inference_query", "classic", True, "answered", s_hit, 1, citations=2, citations_verified=1,
                       model_calls=1, tool_calls=1, latency_ms=100),
        QuestionResult("q2", "null_query", "classic", False, "not_enough_evidence", None, 3, latency_ms=300),
        QuestionResult("q3", "null_query", "classic", False, "answered", None, 3, latency_ms=200),
    ]
    summary = summarise(results)["classic"]
    assert summary["all"]["evidence_recall"] == 0.5
    assert summary["all"]["null_abstained"] == 0.5
    assert summary["all"]["citations_verified_share"] == 0.5 and summary["all"]["citations_unverified"] == 1
    assert summary["all"]["latency_ms_p50"] == 200
    assert summary["inference_query"]["null_abstained"] is None
    assert summary["null_query"]["evidence_recall"] is None


def test_judging_answers_treats_abstention_as_insufficient_information():
    assert judge_answer(answer="", outcome="not_enough_evidence", gold="Insufficient information.", generates_text=True) == (True, True)
    assert judge_answer(answer="Sam Altman", outcome="answered", gold="Sam Altman", generates_text=False) == (None, None)


def test_retrieval_only_baselines_have_no_abstention_figures():
    results = [QuestionResult("q1", "null_query", "search:keyword", False, "retrieved", None, 10)]
    figures = summarise(results)["search:keyword"]["all"]
    assert figures["null_abstained"] is None and figures["answerable_abstained"] is None
