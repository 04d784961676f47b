"""Metric code on hand-made data with known answers (no database)."""

from __future__ import annotations

import pytest

from bench.evaluation.metrics import (
    ContextChunk,
    GoldItem,
    answer_contains,
    evidence_recall,
    lenient_correct,
    percentile,
    quote_precision_counts,
    quoted_citations,
    retrieval_scores,
    stated_yes_no,
    strict_correct,
)
from bench.evaluation.summary import QuestionResult, judge_answer, summarise

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


# --- All facts, answer containment, answer precision -----------------------------------------

OFFLINE_ANSWER = """Extractive answer (offline mode: the sentences below are quoted from the sources, not generated).

1. Which battle came first, the Battle of Manila or the Battle of Guam?:
   - "The Second Battle of Guam was fought in July 1944, with no quarter given." [c:12]
   - "Manila fell in 1945." [c:13, c:14]

Not found in the documents you can see: "the Battle of Manila or the Battle of Guam"."""
QUESTION = "Which battle came first, the Battle of Manila or the Battle of Guam?"


def test_containment_is_squad_normalised_on_whole_words():
    assert answer_contains("It was the Minnesota Vikings.", "Minnesota Vikings")
    assert answer_contains("Sam  ALTMAN, reportedly", "Sam Altman")
    assert not answer_contains("Samuel Altmann", "Sam Altman")  # whole words, not substrings
    assert not answer_contains("Nobody knows.", "Sam Altman")
    assert answer_contains('The answer to the question is "Google"', "Google")
    assert answer_contains("anything", "the") is None  # a gold answer that normalises to nothing is not judged


def test_containment_ignores_what_only_repeats_the_question():
    # The part heading and the "not found" list repeat the question: neither battle counts from them.
    assert not answer_contains(OFFLINE_ANSWER, "Battle of Minsk", question=QUESTION)
    assert answer_contains(OFFLINE_ANSWER, "Battle of Guam", question=QUESTION)  # a quoted sentence holds it
    heading_only = "1. Which battle came first, the Battle of Manila or the Battle of Guam?:\n   - \"Manila fell.\" [c:1]"
    assert not answer_contains(heading_only, "Battle of Guam", question=QUESTION)
    assert answer_contains(heading_only, "Battle of Guam")  # without the question, everything counts


def test_a_yes_no_gold_answer_must_be_stated_not_quoted():
    assert stated_yes_no("No, they were not.") == "no"
    assert stated_yes_no("Both were British, so yes.") == "yes"
    assert stated_yes_no(OFFLINE_ANSWER) is None  # "no quarter" is inside a quotation
    assert answer_contains("Yes. Both reports say so.", "Yes")
    assert not answer_contains("Yes. Both reports say so.", "no")
    assert not answer_contains(OFFLINE_ANSWER, "no", question=QUESTION)
    assert not answer_contains("Nothing is known; nobody said.", "no")  # whole words only


def test_quotations_and_the_chunks_they_cite():
    assert quoted_citations(OFFLINE_ANSWER) == [
        ("The Second Battle of Guam was fought in July 1944, with no quarter given.", (12,)), ("Manila fell in 1945.", (13, 14))]
    assert quoted_citations("Unquoted claim [c:5].") == []
    # Chunk 12 is from a gold document; the second quote cites 13 (not gold) and 14 (gold): it counts as gold once.
    assert quote_precision_counts(OFFLINE_ANSWER, {12: "guam", 13: "other", 14: "manila"}, ["guam", "manila"]) == (2, 2)
    assert quote_precision_counts(OFFLINE_ANSWER, {12: "guam", 13: "other"}, ["guam", "manila"]) == (2, 1)
    assert quote_precision_counts("No quotes.", {}, ["guam"]) == (0, 0)


def test_summary_reports_all_facts_containment_and_precision_where_they_apply():
    gold = [GoldItem(FACT_A), GoldItem(FACT_B)]
    both = retrieval_scores([chunk(f"{FACT_A} {FACT_B}")], gold)
    one = retrieval_scores([chunk(FACT_A)], gold)
    results = [
        QuestionResult("q1", "bridge", "auto", True, "answered", both, 1, contained=True, quotes=3, quotes_on_gold=3),
        QuestionResult("q2", "bridge", "auto", True, "answered", one, 1, contained=False, quotes=1, quotes_on_gold=0),
        QuestionResult("q3", "bridge", "auto", True, "not_enough_evidence", one, 1, contained=False),
        QuestionResult("q4", "null_query", "auto", False, "answered", None, 2, quotes=5),  # unanswerable: not in precision
        QuestionResult("q5", "bridge", "search:hybrid", True, "retrieved", both, 1),
    ]
    summary = summarise(results)
    auto = summary["auto"]["all"]
    assert auto["all_facts"] == pytest.approx(1 / 3)
    assert auto["answer_containment"] == pytest.approx(1 / 3)
    assert auto["answer_precision"] == pytest.approx(3 / 4)  # micro: 3 of the 4 quotes of answerable questions
    retrieval = summary["search:hybrid"]["all"]
    assert retrieval["all_facts"] == 1.0
    assert retrieval["answer_containment"] is None and retrieval["answer_precision"] is None


def test_records_written_before_the_new_figures_still_load():
    old = QuestionResult("q1", "bridge", "classic", False, "answered", None, 0).as_dict()
    for key in ("contained", "quotes", "quotes_on_gold"):
        old.pop(key)
    assert QuestionResult.from_dict(old).quotes == 0


def test_punctuation_outside_ascii_between_words_separates_them():
    # "1989" is a word of "May 1, 1989—was": SQuAD's ASCII-only list would join "1989—was" into one.
    assert answer_contains("The attraction\u2014which debuted on May 1, 1989\u2014was closed.", "1989")
    assert answer_contains("the \u201cGreat Movie Ride\u201d", "Great Movie Ride")
    assert not answer_contains("in 19\u201389", "1989")  # a dash inside a figure splits it: not the figure
