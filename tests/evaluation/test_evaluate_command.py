"""`manage.py evaluate` end to end on a tiny tenant-style question set (hash embedder, real PostgreSQL)."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from bench.evaluation.dataset import load_corpus
from bench.evaluation.environment import NUMERICAL_PACKAGES
from bench.evaluation.runner import EvaluationError, ensure_corpus
from kb.models import Chunk, Corpus, Document
from tenants.scope import activate

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

DOCS = [
    {"doc_id": "travel", "title": "Travel policy", "source": "HR Handbook", "published_at": "2024-03-01T09:00:00+00:00",
     "text": "Hotels are reimbursed up to 150 euros per night.\n\nEconomy class is required for flights under six hours."},
    {"doc_id": "leave", "title": "Leave policy", "source": "HR Bulletin", "published_at": "2024-05-10T09:00:00+00:00",
     "text": "Employees receive 25 days of annual leave per calendar year.\n\nSick leave needs a doctor's note from day three."},
    {"doc_id": "security", "title": "Security policy", "source": "IT Desk", "published_at": "2024-06-01T09:00:00+00:00",
     "text": "Passwords must be at least 14 characters long and are never shared."},
]
QUESTIONS = [
    {"qid": "q-hotel", "question": "According to the HR Handbook, how much is reimbursed for hotels per night?", "answer": "150 euros",
     "question_type": "lookup", "evidence": [{"doc_id": "travel", "fact": "Hotels are reimbursed up to 150 euros per night."}]},
    {"qid": "q-leave", "question": "How many days of annual leave do employees receive?", "question_type": "lookup",
     "expected_sources": ["Leave policy"]},
    {"qid": "q-null", "question": "What is the chief executive's favourite colour?", "question_type": "null_query"},
]


@pytest.fixture
def files(tmp_path):
    corpus, questions = tmp_path / "corpus.jsonl", tmp_path / "questions.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return corpus, questions


def test_evaluate_writes_report_json_markdown_and_charts(files, tmp_path):
    corpus, questions = files
    out = tmp_path / "out"
    call_command("evaluate", corpus=corpus, questions=questions, out=out, tenant="eval-test", records=True,
                 strategies="classic,agentic,auto,pipeline,search:keyword,facets:keyword")
    report = json.loads((out / "report.json").read_text())
    summary = report["summary"]
    assert list(summary) == ["classic", "agentic", "auto", "pipeline", "search:keyword", "facets:keyword"]
    for strategy, figures in summary.items():
        assert figures["all"]["errors"] == 0, strategy
        assert figures["all"]["answerable"] == 2 and figures["all"]["unanswerable"] == 1
        assert figures["all"]["mean_context_size"] <= 10
    assert summary["classic"]["lookup"]["hits_at_10"] == 1.0  # a three-document corpus: everything is in the top 10
    assert summary["classic"]["all"]["model_calls"] >= 3 and summary["classic"]["all"]["tool_calls"] >= 3
    assert report["meta"]["provider"].startswith("offline")
    # What it ran on: the code's commit, the numerical libraries, the CPU (figures can move between machines).
    environment = report["meta"]["environment"]
    assert environment["numpy"] == np.__version__ and environment["python"] == platform.python_version()
    assert environment["commit"] and environment["cpu"] and set(NUMERICAL_PACKAGES) <= set(environment)
    markdown = (out / "report.md").read_text()
    assert f"- ran on: commit {environment['commit']}, Python {environment['python']}, torch " in markdown
    assert "| classic |" in markdown and "Hits@10" in markdown
    assert {p.name for p in out.glob("*.png")} == {"evidence_recall_by_type.png", "hits_at_10_by_type.png", "recall_vs_cost.png"}
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3 * 6
    # Reports carry ids and figures only, never question or corpus text.
    assert "150 euros" not in (out / "report.json").read_text() + markdown + (out / "records.jsonl").read_text()


def test_reingest_reuses_unchanged_documents_and_drops_removed_ones(files):
    corpus, _ = files
    docs = load_corpus(corpus)
    first = ensure_corpus(docs, tenant_slug="eval-reuse", corpus_name="c")
    assert first.uploaded == 3
    again = ensure_corpus(docs[:2], tenant_slug="eval-reuse", corpus_name="c")
    assert again.uploaded == 0 and sorted(again.doc_keys.values()) == ["leave", "travel"]
    with activate(again.scope):
        assert Document.objects.for_scope(again.scope).count() == 2


def test_chunk_size_is_set_for_a_new_corpus_and_checked_on_reuse(files):
    corpus, _ = files
    docs = load_corpus(corpus)
    ev = ensure_corpus(docs, tenant_slug="eval-size", corpus_name="c", chunk_tokens=120)
    with activate(ev.scope):
        assert Corpus.objects.for_scope(ev.scope).get(pk=ev.corpus_id).chunk_target_tokens == 120
    assert ensure_corpus(docs, tenant_slug="eval-size", corpus_name="c", chunk_tokens=120).uploaded == 0
    assert ensure_corpus(docs, tenant_slug="eval-size", corpus_name="c").uploaded == 0  # not asked: as it is
    with pytest.raises(EvaluationError, match="chunked at 120 tokens"):
        ensure_corpus(docs, tenant_slug="eval-size", corpus_name="c", chunk_tokens=200)


def test_unknown_strategy_is_refused(files, tmp_path):
    corpus, questions = files
    with pytest.raises(CommandError, match="unknown strategy"):
        call_command("evaluate", corpus=corpus, questions=questions, out=tmp_path, strategies="classic,telepathy")


def test_shards_merge_into_the_report_of_one_run(files, tmp_path):
    corpus, questions = files
    common = {"corpus": corpus, "questions": questions, "tenant": "eval-shards", "strategies": "classic,search:keyword",
              "no_charts": True}
    call_command("evaluate", out=tmp_path / "whole", **common)
    for i in (0, 1):
        call_command("evaluate", out=tmp_path / f"s{i}", shard=f"{i}/2", **common)
    call_command("evaluate", merge=[tmp_path / "s0", tmp_path / "s1"], out=tmp_path / "merged", no_charts=True)
    whole = json.loads((tmp_path / "whole" / "report.json").read_text())["summary"]
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())["summary"]
    for strategy in ("classic", "search:keyword"):
        for metric in ("questions", "evidence_recall", "hits_at_10", "null_abstained", "tool_calls"):
            assert merged[strategy]["all"][metric] == whole[strategy]["all"][metric], (strategy, metric)
    # Runs of other strategies over the same questions, merged: each question is counted once.
    call_command("evaluate", out=tmp_path / "keyword", records=True, **{**common, "strategies": "search:keyword"})
    call_command("evaluate", out=tmp_path / "classic", records=True, **{**common, "strategies": "classic"})
    call_command("evaluate", merge=[tmp_path / "keyword", tmp_path / "classic"], out=tmp_path / "by-strategy", no_charts=True)
    meta = json.loads((tmp_path / "whole" / "report.json").read_text())["meta"]
    assert json.loads((tmp_path / "by-strategy" / "report.json").read_text())["meta"]["questions"] == meta["questions"]
    # Shards of one machine keep its environment; a shard run elsewhere makes the merge say so.
    assert json.loads((tmp_path / "merged" / "report.json").read_text())["meta"]["environment"] == meta["environment"]
    elsewhere = tmp_path / "s1" / "report.json"
    shard = json.loads(elsewhere.read_text())
    shard["meta"]["environment"] = {**shard["meta"]["environment"], "cpu": "another CPU (avx2)"}
    elsewhere.write_text(json.dumps(shard))
    call_command("evaluate", merge=[tmp_path / "s0", tmp_path / "s1"], out=tmp_path / "mixed", no_charts=True)
    mixed = json.loads((tmp_path / "mixed" / "report.json").read_text())["meta"]
    assert mixed["environment"] is None and [e["cpu"] for e in mixed["shard_environments"]][1] == "another CPU (avx2)"


def test_embedding_model_is_set_for_a_new_corpus_and_checked_on_reuse(files):
    corpus, _ = files
    docs = load_corpus(corpus)
    ev = ensure_corpus(docs, tenant_slug="eval-model", corpus_name="c", embedding_model="hash:32")
    assert ev.model_key == "hash:32"
    with activate(ev.scope):
        assert Corpus.objects.for_scope(ev.scope).get(pk=ev.corpus_id).model_key == "hash:32"
        assert {c.embedding_model for c in Chunk.objects.for_scope(ev.scope).filter(corpus_id=ev.corpus_id)} == {"hash:32"}
    assert ensure_corpus(docs, tenant_slug="eval-model", corpus_name="c").uploaded == 0  # not asked: as it is
    with pytest.raises(EvaluationError, match="embedded with hash:32, not minilm-l6-v2:384"):
        ensure_corpus(docs, tenant_slug="eval-model", corpus_name="c", embedding_model="minilm-l6-v2:384")
    with pytest.raises(EvaluationError, match="'word2vec': an integer from 1"):  # no dimension
        ensure_corpus(docs, tenant_slug="eval-model", corpus_name="d", embedding_model="word2vec")
    with pytest.raises(EvaluationError, match="unknown embedding model"):
        ensure_corpus(docs, tenant_slug="eval-model", corpus_name="d", embedding_model="word2vec:300")


@pytest.fixture
def registry(files, tmp_path, monkeypatch):
    """A two-set suite over the tiny files, plus a set whose files are absent."""
    from bench.evaluation import suite

    corpus, questions = files
    news = suite.CorpusProfile(date_key="published_at", facet_keys=("source",), language="english")
    sets = (suite.EvalSet("policies", corpus, questions, tenant="eval-suite-a", corpus_name="policies", profile=news),
            suite.EvalSet("policies-again", corpus, questions, tenant="eval-suite-b", corpus_name="again"),
            suite.EvalSet("elsewhere", tmp_path / "absent" / "corpus.jsonl", tmp_path / "absent" / "q.jsonl",
                          tenant="eval-suite-c", corpus_name="x"))
    monkeypatch.setattr(suite, "SUITE", sets)
    return sets


def test_suite_runs_every_set_into_one_report_and_skips_absent_ones(registry, tmp_path, capsys):
    out = tmp_path / "suite"
    call_command("evaluate", suite=True, out=out, strategies="classic,search:keyword", no_charts=True)
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["sets"] == ["policies", "policies-again"]
    assert "elsewhere" in report["meta"]["skipped"] and "skipped" in capsys.readouterr().err
    for name in ("policies", "policies-again"):
        summary = report["sets"][name]["summary"]
        assert list(summary) == ["classic", "search:keyword"]
        assert summary["classic"]["all"]["questions"] == 3 and summary["classic"]["all"]["errors"] == 0
        assert summary["classic"]["all"]["all_facts"] is not None
        assert (out / name / "report.md").exists()
    assert report["sets"]["policies"]["meta"]["tenant"] == "eval-suite-a"
    markdown = (out / "report.md").read_text()
    assert "## Summary" in markdown and "| policies | classic | 3 |" in markdown and "| policies-again | search:keyword | 3 |" in markdown
    assert "## Set `policies`" in markdown and "### Retrieval" in markdown
    assert "150 euros" not in markdown + (out / "report.json").read_text()
    # Each set in its own tenant and corpus, declared with its profile.
    ev = ensure_corpus(load_corpus(registry[0].corpus), tenant_slug="eval-suite-a", corpus_name="policies")
    assert ev.uploaded == 0
    with activate(ev.scope):
        corpus = Corpus.objects.for_scope(ev.scope).get(pk=ev.corpus_id)
        assert (corpus.date_key, corpus.facet_keys, corpus.language) == ("published_at", ["source"], "english")
        assert Document.objects.for_scope(ev.scope).filter(dated_at__isnull=False).count() == 3


def test_suite_picks_sets_by_name_and_refuses_unknown_ones(registry, tmp_path):
    out = tmp_path / "one"
    call_command("evaluate", sets="policies-again", out=out, strategies="search:keyword", no_charts=True, limit=2)
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["sets"] == ["policies-again"] and report["meta"]["limit"] == 2
    assert report["sets"]["policies-again"]["summary"]["search:keyword"]["all"]["questions"] == 2
    with pytest.raises(CommandError, match="unknown set 'nope'"):
        call_command("evaluate", sets="policies,nope", out=out)
    with pytest.raises(CommandError, match="no set of the suite could run"):
        call_command("evaluate", sets="elsewhere", out=out)


def test_a_reused_corpus_is_brought_up_to_its_profile(files):
    from bench.evaluation.suite import CorpusProfile

    docs = load_corpus(files[0])
    ensure_corpus(docs, tenant_slug="eval-profile", corpus_name="c")  # as before profiles: undated
    ev = ensure_corpus(docs, tenant_slug="eval-profile", corpus_name="c", profile=CorpusProfile(date_key="published_at"))
    assert ev.uploaded == 0
    with activate(ev.scope):
        assert Corpus.objects.for_scope(ev.scope).get(pk=ev.corpus_id).date_key == "published_at"
        assert Document.objects.for_scope(ev.scope).filter(dated_at__isnull=False).count() == 3


THREAD_DOCS = [
    {"doc_id": "ada", "title": "Ada Lovelace (mathematician)",
     "text": "Ada Lovelace was an English mathematician. She worked with Charles Babbage on the Analytical Engine. "
             "Her notes describe an algorithm for the engine."},
    {"doc_id": "engine", "title": "Analytical Engine",
     "text": "The Analytical Engine was a proposed mechanical computer designed by Charles Babbage in 1837."},
    {"doc_id": "kiln", "title": "Brick kiln", "text": "A brick kiln fires clay bricks at about 1000 degrees."},
]
THREAD_QUESTIONS = [
    {"qid": "q-bridge", "question": "Which mechanical computer did Ada Lovelace write notes about, and who designed that computer?",
     "question_type": "bridge", "answer": "Analytical Engine",
     "evidence": [{"doc_id": "ada", "fact": "She worked with Charles Babbage on the Analytical Engine."},
                  {"doc_id": "engine",
                   "fact": "The Analytical Engine was a proposed mechanical computer designed by Charles Babbage in 1837."}]},
    {"qid": "q-plain", "question": "At what temperature are clay bricks fired?", "question_type": "lookup",
     "evidence": [{"doc_id": "kiln", "fact": "A brick kiln fires clay bricks at about 1000 degrees."}]},
    {"qid": "q-null", "question": "What is the chief executive's favourite colour?", "question_type": "null_query"},
]


def test_split_question_refers_back_with_the_subjects_pronoun():
    from bench.evaluation.conversation import split_question
    from bench.evaluation.dataset import CorpusDoc, Question
    from bench.evaluation.metrics import GoldItem

    docs = {d["doc_id"]: CorpusDoc(d["doc_id"], d["title"], d["text"]) for d in THREAD_DOCS}

    def question(text: str, *keys: str) -> Question:
        return Question("q", text, "bridge", None, tuple(GoldItem(fact=None, doc_key=k) for k in keys))

    turns = split_question(question("Which engine did Ada Lovelace describe?", "ada", "engine"), docs)
    assert turns is not None and turns.name == "Ada Lovelace"  # the title's "(mathematician)" is dropped
    assert turns.first == "Tell me about Ada Lovelace."
    assert turns.followup == "Which engine did she describe?"  # her document calls her "she"
    turns = split_question(question("Who designed the Analytical Engine's mill?", "engine"), docs)
    assert turns is not None and turns.followup == "Who designed its mill?"  # possessive kept, "the" dropped
    turns = split_question(question("What was written about the Analytical Engine?", "engine"), docs)
    assert turns is not None and turns.followup == "What was written about it?"
    assert split_question(question("How hot is a kiln?", "kiln"), docs) is None  # it names nothing of its documents
    assert split_question(question("Did Ada Lovelace publish her notes?", "ada"), docs) is None  # a pronoun of its own
    assert split_question(question("Which engine did Ada Lovelace describe?"), docs) is None  # unanswerable


def test_conversation_mode_scores_the_second_turn_beside_the_standalone_question(tmp_path):
    corpus, questions, out = tmp_path / "corpus.jsonl", tmp_path / "questions.jsonl", tmp_path / "out"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in THREAD_DOCS))
    questions.write_text("".join(json.dumps(q) + "\n" for q in THREAD_QUESTIONS))
    call_command("evaluate", corpus=corpus, questions=questions, out=out, tenant="eval-thread", conversation=True,
                 strategies="classic,search:keyword", records=True)
    report = json.loads((out / "report.json").read_text())
    assert list(report["summary"]) == ["classic", "conversation:classic", "search:keyword"]
    assert report["meta"]["questions"] == 1  # only the question that names one of its documents can be a follow-up
    figures = report["meta"]["conversation"]["conversation:classic"]
    assert figures["questions"] == 1 and figures["resolved_back"] == 1.0
    assert figures["second_turn_recall"] == report["summary"]["conversation:classic"]["all"]["evidence_recall"]
    assert figures["difference_points"] == round(100 * (figures["second_turn_recall"] - figures["standalone_recall"]), 1)
    assert report["summary"]["conversation:classic"]["all"]["errors"] == 0
    assert "Conversation mode" in (out / "report.md").read_text()
    from agents.models import Conversation, Run
    from tenants.models import Tenant
    from tests.factories import whole_tenant

    scope = whole_tenant(Tenant.objects.get(slug="eval-thread"))
    with activate(scope):
        thread = Conversation.objects.for_scope(scope).get()
        turns = list(Run.objects.for_scope(scope).filter(conversation=thread).order_by("turn"))
    assert [r.turn for r in turns] == [1, 2]
    assert turns[1].message == "Which mechanical computer did she write notes about, and who designed that computer?"
    assert "Ada Lovelace" in turns[1].question  # the follow-up, made standalone, is what was searched
    assert "Ada Lovelace" not in (out / "records.jsonl").read_text()  # records hold ids and figures only


def test_conversation_mode_needs_an_agent_strategy(files, tmp_path):
    corpus, questions = files
    with pytest.raises(CommandError, match="--conversation needs an agent strategy"):
        call_command("evaluate", corpus=corpus, questions=questions, out=tmp_path / "o", tenant="eval-x", conversation=True,
                     strategies="search:keyword")
