"""The summarisation set's questions and scores (bench.evaluation.summarisation). Pure."""

from __future__ import annotations

from bench.evaluation.dataset import CorpusDoc
from bench.evaluation.summarisation import aggregate, statements, summary_questions, term_coverage, verified_share

LONG = " ".join(f"Sentence number {i} talks about topic {i} in detail." for i in range(8))


def test_questions_are_seeded_and_skip_short_or_ambiguous_documents():
    docs = [CorpusDoc("a", "Alpha guide", LONG), CorpusDoc("b", "Beta guide", "Too short. Only two."),
            CorpusDoc("c", "Same title", LONG), CorpusDoc("d", "Same title", LONG), CorpusDoc("e", "Epsilon guide", LONG)]
    picked = summary_questions("set", docs, 5, seed=1)
    assert {q.doc.doc_id for q in picked} == {"a", "e"}
    assert picked == summary_questions("set", docs, 5, seed=1)
    assert all(q.question == f"Summarise the document '{q.doc.title}'" for q in picked)


def test_statements_verified_share_and_coverage():
    answer = ('Summary of Alpha:\n- "One fact here." [c:1]\n- "Another fact there." [c:2] "A third one too." [c:3, c:4]\n'
              "No citation at all here.")
    assert len(statements(answer)) == 4  # the heading is not a statement
    assert verified_share(answer, ["verified", "verified", "verified", "verified"]) == 0.75  # the uncited one fails
    assert verified_share(answer, ["verified", "quote_mismatch", "verified", "verified"]) == 0.5
    assert verified_share(answer, ["verified", "verified", "verified", "not_retrieved"]) == 0.5
    assert verified_share("", []) == 0.0
    assert term_coverage("hotel", "The hotel limit is strict. The hotel is booked.") == 0.4  # hotel x2 of 5 occurrences
    assert term_coverage("nothing", "") == 0.0


def test_figures_per_half_and_overall():
    rows = [{"set": "s", "strategy": "auto", "half": half, "outcome": outcome, "cited_gold": gold, "verified": 1.0,
             "coverage": 0.5, "lead": 0.4, "statements": 4, "latency_ms": 100.0}
            for half, outcome, gold in (("fit", "answered", True), ("report", "answered", False), ("report", "unverified", False))]
    figures = {f["half"]: f for f in aggregate(rows)}
    assert figures["all"]["n"] == 3 and figures["fit"]["cited_gold"] == 1.0 and figures["report"]["answered"] == 0.5


def test_brackets_that_are_not_citations_do_not_cut_a_statement():
    answer = '- "Select [Settings] > General > Reset." [c:7]\n- "Press [Home] twice." [c:8]'
    assert statements(answer) == ['- "Select [Settings] > General > Reset." [c:7]', '- "Press [Home] twice." [c:8]']
    assert verified_share(answer, ["verified", "verified"]) == 1.0
