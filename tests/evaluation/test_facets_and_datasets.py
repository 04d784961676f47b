"""Dataset loading and final-context derivation on hand-made inputs (no database)."""

from __future__ import annotations

import json

import pytest

from bench.evaluation.dataset import DatasetError, load_corpus, load_questions, sample_questions
from bench.evaluation.metrics import GoldItem
from bench.evaluation.runner import final_context_ids


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
    from bench.evaluation.dataset import Question

    qs = [Question(f"q{i}", "x", "a" if i % 4 else "b", None, ()) for i in range(100)]
    one, two = sample_questions(qs, limit=20, seed=1), sample_questions(qs, limit=20, seed=1)
    assert one == two and len(one) == 20
    assert sum(q.question_type == "b" for q in one) == 5
    assert sample_questions(qs, limit=None, seed=1) == qs


