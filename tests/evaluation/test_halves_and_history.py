"""Halves of a question set, the shapes of the manual and multi-turn sets, and history replay."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.core.management import CommandError, call_command

from agents.budgets import Budgets
from bench.evaluation.dataset import HALVES, Question, Turn, half_of, load_corpus, load_questions, select_half
from bench.evaluation.history import history_pairs
from bench.evaluation.management.commands.evaluate import _strategies
from bench.evaluation.metrics import ContextChunk, GoldItem, retrieval_scores
from bench.evaluation.report import markdown, suite_markdown
from bench.evaluation.runner import history_thread
from bench.evaluation.summary import summarise


def _question(qid: str, answerable: bool, history: tuple[Turn, ...] = ()) -> Question:
    gold = (GoldItem(doc_key="d1"),) if answerable else ()
    return Question(qid=qid, question="q?", question_type="t", answer=None, gold=gold, history=history)


# --- Halves ---------------------------------------------------------------------------------------

def test_halves_are_deterministic_disjoint_and_cover_every_question():
    questions = [_question(f"set-{i:04d}", answerable=i % 4 != 0) for i in range(400)]
    fit, report = select_half(questions, "fit"), select_half(questions, "report")
    assert {q.qid for q in fit}.isdisjoint({q.qid for q in report})
    assert len(fit) + len(report) == len(questions)
    assert select_half(questions, None) == questions
    assert [q.qid for q in select_half(list(reversed(questions)), "fit")] == [q.qid for q in reversed(fit)]  # order kept
    for half in (fit, report):  # both halves carry answerable and unanswerable questions
        assert any(q.answerable for q in half) and any(not q.answerable for q in half)
        assert 150 < len(half) < 250
    # The rule is the qid's own hash: a question's half does not depend on the other questions.
    assert half_of("set-0007") == HALVES[hashlib.sha256(b"set-0007").digest()[0] % 2]
    assert [q.qid for q in select_half(questions[:10], "fit")] == [q.qid for q in fit if q.qid in {x.qid for x in questions[:10]}]
    with pytest.raises(ValueError, match="unknown half"):
        select_half(questions, "train")


# --- Set shapes -----------------------------------------------------------------------------------

def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_manual_shaped_set_loads_with_section_gold_and_nulls(tmp_path):
    corpus = _write(tmp_path / "corpus.jsonl", [
        {"doc_id": "m-s001", "title": "Setup > Pairing the remote", "text": "Point the remote at the sensor and hold two buttons.",
         "section": "Pairing the remote", "chapter": "Setup", "source": "A device manual"},
        {"doc_id": "m-s002", "title": "Setup > Updating the software", "text": "Open Settings, then Support, then Update."},
    ])
    questions = _write(tmp_path / "questions.jsonl", [
        {"qid": "m-1", "question": "How do I pair the remote?", "answer": "Point the remote at the sensor.",
         "question_type": "normal", "expected_sources": ["m-s001"], "gold_path": "Setup > Pairing the remote"},
        {"qid": "m-2", "question": "Where is the update?", "question_type": "paraphrased",
         "expected_sources": ["setup > updating the software"]},  # a title, matched without case
        {"qid": "m-3", "question": "Can I pay by phone?", "question_type": "null_query", "evidence": [], "phone_feature": "pay"},
    ])
    docs = load_corpus(corpus)
    assert docs[0].metadata == {"section": "Pairing the remote", "chapter": "Setup", "source": "A device manual"}
    first, second, null = load_questions(questions, docs)
    assert first.gold == (GoldItem(doc_key="m-s001"),) and first.answerable and first.history == ()
    assert second.gold == (GoldItem(doc_key="m-s002"),)
    assert not null.answerable and null.question_type == "null_query"
    # Section-level gold: any chunk of the section is a hit, ranks beyond 4 are not a Hits@4 hit.
    ctx = [ContextChunk("other", "m-s002")] * 4 + [ContextChunk("Point the remote", "m-s001")]
    scores = retrieval_scores(ctx, first.gold)
    assert scores.hits_at_4 == 0.0 and scores.hits_at_10 == 1.0 and scores.evidence_recall == 1.0


def test_a_multi_turn_set_loads_history_and_its_unanswerable_mark(tmp_path):
    corpus = _write(tmp_path / "corpus.jsonl", [
        {"doc_id": "p-1", "text": "Applications are valid for 12 months.", "collection": "govt", "also_ids": ["p-9"]},
    ])
    history = [{"speaker": "user", "text": "How do I apply for a permit?"},
               {"speaker": "agent", "text": "Fill in the application and pay the fee."}]
    questions = _write(tmp_path / "questions.jsonl", [
        {"qid": "c1<::>3", "question": "Does it expire?", "question_type": "govt", "expected_sources": ["p-1"],
         "history": history, "reference_response": "After 12 months.", "answerability": "answerable", "multi_turn": "Follow-up"},
        {"qid": "c2<::>5", "question": "Is it free?", "question_type": "govt-null", "history": history,
         "answerability": "unanswerable"},
        # Marked unanswerable although it names a passage: the mark wins, the right outcome is to abstain.
        {"qid": "c3<::>2", "question": "And on weekends?", "question_type": "govt-null", "expected_sources": ["p-1"],
         "answerability": "UNANSWERABLE"},
    ])
    docs = load_corpus(corpus)
    assert docs[0].title == "p-1" and docs[0].metadata == {"collection": "govt"}  # no title: the id; lists are not metadata
    answerable, null, marked = load_questions(questions, docs)
    assert answerable.answerable and answerable.answer is None  # a reference response is not a short answer
    assert answerable.history == (Turn("user", "How do I apply for a permit?"), Turn("agent", "Fill in the application and pay the fee."))
    assert not null.answerable and null.history == answerable.history
    assert not marked.answerable and marked.gold == ()


def test_a_history_turn_without_a_known_speaker_is_refused(tmp_path):
    from bench.evaluation.dataset import DatasetError

    corpus = _write(tmp_path / "corpus.jsonl", [{"doc_id": "p-1", "text": "Text."}])
    questions = _write(tmp_path / "questions.jsonl", [{"question": "Q?", "history": [{"speaker": "narrator", "text": "x"}]}])
    with pytest.raises(DatasetError, match="speaker"):
        load_questions(questions, load_corpus(corpus))


# --- History replay -------------------------------------------------------------------------------

def test_history_becomes_user_and_agent_pairs_oldest_first():
    turns = (Turn("agent", "Welcome."), Turn("user", "First?"), Turn("agent", "One."), Turn("agent", "And more."),
             Turn("user", "Second?"), Turn("user", "Third?"), Turn("agent", "Three."))
    assert history_pairs(turns) == [("", "Welcome."), ("First?", "One.\nAnd more."), ("Second?", ""), ("Third?", "Three.")]
    assert history_pairs(()) == []


def test_the_replayed_thread_is_the_given_history_within_the_history_budget():
    turns = tuple(t for i in range(8) for t in (Turn("user", f"question {i}?"), Turn("agent", f"answer {i}.")))
    thread = history_thread(_question("h", True, turns), Budgets(history_turns=3))
    assert thread.history == (("question 5?", "answer 5."), ("question 6?", "answer 6."), ("question 7?", "answer 7."))
    assert thread.evidence == ()  # no turn of it was answered here, so there is no thread evidence to reuse
    long = (Turn("user", "old?"), Turn("agent", "x" * 3000), Turn("user", "new?"), Turn("agent", "y" * 3000))
    kept = history_thread(_question("h", True, long), Budgets(history_tokens=400)).history
    assert [q for q, _ in kept] == ["new?"] and kept[0][1].endswith(" […]")  # answers cut, the oldest dropped first
    assert history_thread(_question("h", True), Budgets()).history == ()  # asked alone


def test_history_and_conversation_flags_add_their_strategies_after_each_agent_strategy():
    opts = {"strategies": "classic,auto,search:keyword", "history": True}
    assert _strategies(opts) == ["classic", "history:classic", "auto", "history:auto", "search:keyword"]
    both = _strategies({"strategies": "auto", "history": True, "conversation": True})
    assert both == ["auto", "history:auto", "conversation:auto"]
    from bench.evaluation.runner import EvaluationError

    with pytest.raises(EvaluationError, match="--history needs an agent strategy"):
        _strategies({"strategies": "search:keyword", "history": True})


def test_reports_name_the_half_and_the_suite_table_has_hits_at_4_abstention_and_latency():
    from bench.evaluation.summary import QuestionResult

    results = [QuestionResult(qid="a", question_type="t", strategy="auto", answerable=True, outcome="not_enough_evidence",
                              scores=retrieval_scores([ContextChunk("x", "d1")], (GoldItem(doc_key="d1"),)), context_size=1,
                              latency_ms=120.0)]
    meta = {"command": "manage.py evaluate", "questions": 1, "answerable": 1, "corpus_documents": 1, "provider": "offline/x",
            "context_chunks": 10, "seed": 13, "finished_at": "now", "elapsed_s": 1.0, "half": "report", "paper_anchors": False}
    report = {"meta": meta, "summary": summarise(results)}
    assert markdown(report).startswith("# Evaluation report (report half)")
    suite = suite_markdown({"meta": {"command": "c", "sets": ["s"], "strategies": ["auto"], "limit": None, "seed": 13,
                                     "finished_at": "now", "elapsed_s": 1.0, "half": "report"}, "sets": {"s": report}})
    assert suite.startswith("# Evaluation suite report (report half)")
    header = next(line for line in suite.splitlines() if line.startswith("| set |"))
    assert "Hits@4" in header and "answerable abstained" in header and "latency p50 ms" in header
    assert "| s | auto | 1 | 1.0000 | 1.000 | 1.000 | 1.000 | – | 1.000 |" in suite


# --- The command ----------------------------------------------------------------------------------

DOCS = [
    {"doc_id": "travel", "title": "Travel policy", "text": "Hotels are reimbursed up to 150 euros per night."},
    {"doc_id": "leave", "title": "Leave policy", "text": "Employees receive 25 days of annual leave per calendar year."},
]
HISTORY = [{"speaker": "user", "text": "What does the travel policy say about hotels?"},
           {"speaker": "agent", "text": "Hotels are reimbursed up to 150 euros per night."}]


@pytest.mark.django_db(databases=["default", "owner"])
def test_history_mode_runs_the_last_turn_over_the_given_thread_beside_the_question_alone(tmp_path):
    qids = [f"h-{i}" for i in range(40)]
    fit = [q for q in qids if half_of(q) == "fit"]
    answerable, null = fit[0], fit[1]
    corpus = _write(tmp_path / "corpus.jsonl", DOCS)
    questions = _write(tmp_path / "questions.jsonl", [
        {"qid": answerable, "question": "Is that per night?", "expected_sources": ["travel"], "history": HISTORY},
        {"qid": null, "question": "Who approves it?", "history": HISTORY, "answerability": "unanswerable"},
        *[{"qid": q, "question": "How many days of leave?", "expected_sources": ["leave"]} for q in qids if q not in fit],
    ])
    out = tmp_path / "out"
    call_command("evaluate", corpus=corpus, questions=questions, out=out, tenant="eval-history", history=True, half="fit",
                 strategies="classic", no_charts=True)
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["half"] == "fit" and report["meta"]["questions"] == 2 and report["meta"]["with_history"] == 2
    assert list(report["summary"]) == ["classic", "history:classic"]
    assert report["summary"]["history:classic"]["all"]["errors"] == 0
    assert report["meta"]["history"]["history:classic"]["questions"] == 2
    text = (out / "report.md").read_text()
    assert text.startswith("# Evaluation report (fit half)") and "History mode" in text
    from agents.models import Run, RunStep
    from tenants.models import Tenant
    from tests.factories import whole_tenant

    scope = whole_tenant(Tenant.objects.get(slug="eval-history"))
    from tenants.scope import activate

    with activate(scope):
        runs = list(Run.objects.for_scope(scope).order_by("seq"))
        followups = set(RunStep.objects.for_scope(scope).filter(name="followup").values_list("run_id", flat=True))
        assert len(runs) == 4 and all(r.conversation_id is None for r in runs)  # no conversation, no stored agent turns
    # Each question ran alone (no follow-up step) and then over its history (a follow-up step first).
    assert [r.pk in followups for r in runs] == [False, True, False, True]


def test_an_unknown_half_is_refused(tmp_path):
    with pytest.raises(CommandError):
        call_command("evaluate", corpus=tmp_path / "c.jsonl", questions=tmp_path / "q.jsonl", half="train")
