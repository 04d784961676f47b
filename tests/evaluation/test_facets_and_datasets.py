"""Facet planning and dataset loading on hand-made inputs (no database)."""

from __future__ import annotations

import json

import pytest

from agents import planning
from agents.evaluation.dataset import DatasetError, load_corpus, load_questions, sample_questions
from agents.evaluation.metrics import GoldItem
from agents.evaluation.runner import final_context_ids

SOURCES = ["TechCrunch", "The Verge", "The Age", "FOX News - Health", "FOX News - Lifestyle", "The Roar | Sports Writers Blog"]


def test_sources_are_found_by_full_name_or_short_name_and_only_as_proper_nouns():
    aliases = planning.source_aliases(SOURCES)
    assert aliases["FOX News"] == ("FOX News - Health", "FOX News - Lifestyle")
    found = planning.find_sources("Did The Roar report it, and what did FOX News say at the age of 30?", aliases)
    assert [values for _, _, values in found] == [("The Roar | Sports Writers Blog",), ("FOX News - Health", "FOX News - Lifestyle")]
    assert planning.find_sources("What did The Roar | Sports Writers Blog say?", aliases)[0][2] == ("The Roar | Sports Writers Blog",)


def test_plan_gives_each_named_source_its_clause_and_date_window():
    q = ("Was the TechCrunch report published on October 31, 2023 consistent with the report from The Verge "
         "published after December 5, 2023?")
    subs = planning.plan(q, SOURCES)
    assert [s.sources for s in subs] == [("TechCrunch",), ("The Verge",)]
    assert (subs[0].published_after, subs[0].published_before) == ("2023-10-31", "2023-11-01")
    assert (subs[1].published_after, subs[1].published_before) == ("2023-12-06", None)
    # Each its own clause first, then the question without publishers and dates (filters match those).
    rest = planning.without_facets(q, SOURCES)
    assert "TechCrunch" not in rest and "Verge" not in rest and "2023" not in rest
    assert subs[0].text == f"Was the TechCrunch report published on October 31, 2023 consistent with the report from  {rest}"
    assert subs[1].text == (" report published on October 31, 2023 consistent with the report from The Verge published after "
                            f"December 5, 2023? {rest}")


def test_a_question_naming_no_source_is_searched_as_is():
    assert planning.plan("Who won the match?", SOURCES) == [planning.SubQuery("Who won the match?")]


def test_interleave_takes_rank_one_of_every_list_first_without_duplicates():
    assert planning.interleave([[1, 2, 3], [4, 1, 5], [6]], k=5, key=lambda x: x) == [1, 4, 6, 2, 3]


def test_fact_segments_cut_a_question_into_the_facts_it_describes():
    sources = ["Sporting News", "Sportskeeda", "CBSSports.com"]
    question = ("Which NFL quarterback, featured in articles from Sporting News, Sportskeeda, and CBSSports.com, threw four "
                "touchdowns against the Cowboys, has accumulated significant fantasy points over recent games, but struggles "
                "with a decreased completion rate when under pressure?")
    segments = planning.fact_segments(question, sources)
    assert segments[1:] == ["has accumulated significant fantasy points over recent games",
                            "struggles with a decreased completion rate when under pressure"]
    # Pieces with too few content words join the next; publishers and framing words never count.
    assert "threw four touchdowns against the Cowboys" in segments[0] and "Sportskeeda" not in segments[0]
    assert planning.fact_segments("Did the TechCrunch article say so?", ["TechCrunch"]) == []
    assert len(planning.fact_segments("What did the report say about hotel costs and meal allowances?")) == 1


def test_fuse_ranks_what_several_lists_agree_on_first():
    assert planning.fuse([[1, 2, 3], [3, 4]], rrf_k=60, key=lambda c: c) == [3, 1, 2, 4]
    assert planning.fuse([[1, 2], [3, 4]], rrf_k=60, key=lambda c: c) == [1, 3, 2, 4]  # ties: first seen first
    assert planning.fuse([], rrf_k=60, key=lambda c: c) == []


def test_final_context_comes_from_the_answer_step_or_is_derived_from_tool_results():
    answer_step = {"kind": "model_call", "name": "answer", "arguments": {"context_chunks": [7, 3]}, "chunk_ids": []}
    tools = [{"kind": "tool_call", "name": "search", "arguments": {}, "chunk_ids": ids} for ids in ([1, 2], [3, 1])]
    assert final_context_ids([*tools, answer_step]) == [7, 3]
    assert final_context_ids(tools) == [1, 3, 2]


@pytest.fixture
def files(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(d) for d in [
        {"doc_id": "d1", "title": "Travel policy", "text": "Hotels up to 150 euros.", "source": "HR", "author": None},
        {"title": "Leave policy", "text": "25 days of leave.", "published_at": "2024-01-01T00:00:00+00:00"},
    ]) + "\n")
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"qid": "a", "question": "Hotel limit?", "answer": "150 euros", "evidence": [{"doc_id": "d1", "fact": "Hotels up to 150 euros."}]},
        {"question": "How many leave days?", "expected_sources": ["leave policy"]},
        {"question": "What is the CEO's salary?"},
    ]) + "\n")
    return corpus, questions


def test_corpus_and_questions_load_with_metadata_and_expected_sources(files):
    corpus_path, questions_path = files
    docs = load_corpus(corpus_path)
    assert [d.doc_id for d in docs] == ["d1", "Leave policy"]
    assert docs[0].metadata == {"source": "HR"}  # null author dropped, text fields are not metadata
    questions = load_questions(questions_path, docs)
    assert questions[0].gold == (GoldItem("Hotels up to 150 euros.", "d1"),)
    assert questions[1].gold == (GoldItem(doc_key="Leave policy"),) and questions[1].question_type == "question"
    assert not questions[2].answerable and questions[2].question_type == "null_query"


def test_malformed_lines_name_file_and_line(tmp_path, files):
    corpus_path, _ = files
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x", "expected_sources": ["nowhere"]}\n')
    with pytest.raises(DatasetError, match="bad.jsonl:1"):
        load_questions(bad, load_corpus(corpus_path))


def test_sampling_is_seeded_and_keeps_the_type_mix():
    from agents.evaluation.dataset import Question

    qs = [Question(f"q{i}", "x", "a" if i % 4 else "b", None, ()) for i in range(100)]
    one, two = sample_questions(qs, limit=20, seed=1), sample_questions(qs, limit=20, seed=1)
    assert one == two and len(one) == 20
    assert sum(q.question_type == "b" for q in one) == 5
    assert sample_questions(qs, limit=None, seed=1) == qs


def test_a_source_named_with_two_dates_gets_a_search_per_date():
    q = ("Has the reporting of The Verge been consistent between the article about phones on October 19, 2023, "
         "and the one covering laptops on December 3, 2023?")
    subs = planning.plan(q, SOURCES)
    assert [s.sources for s in subs] == [("The Verge",), ("The Verge",)]
    assert [(s.published_after, s.published_before) for s in subs] == [("2023-10-19", "2023-10-20"), ("2023-12-03", "2023-12-04")]
    rest = planning.without_facets(q, SOURCES)
    assert subs[0].text == f" been consistent between the article about phones on October 19, 2023 {rest}"
    assert subs[1].text == f", and the one covering laptops on December 3, 2023 {rest}"


def test_clause_segments_give_each_fact_its_publishers_clause_and_date():
    sources = ["Polygon", "Engadget", "TechCrunch"]
    question = ("After the Polygon report on the Steam Deck OLED improvements published on November 9, 2023, and the "
                "Engadget review of the handheld battery life, did the two sources agree?")
    subs = planning.clause_segments(question, sources)
    polygon = [s for s in subs if s.sources == ("Polygon",)]
    engadget = [s for s in subs if s.sources == ("Engadget",)]
    assert polygon and all((s.published_after, s.published_before) == ("2023-11-09", "2023-11-10") for s in polygon)
    assert any("Steam Deck OLED improvements" in s.text for s in polygon)
    assert engadget and all(s.published_after is None for s in engadget)
    assert any("handheld battery life" in s.text for s in engadget)
    assert not any("Polygon" in s.text or "Engadget" in s.text or "2023" in s.text for s in subs)
    # One publisher, or a clause that describes nothing ("reported by TechCrunch and Polygon"): none.
    assert planning.clause_segments("Did the Polygon review praise the Steam Deck OLED screen?", sources) == []
    assert planning.clause_segments("Which company, as reported by TechCrunch and Polygon, makes the Steam Deck?", sources) == []
