"""`manage.py evaluate --xquad-dir`: a tiny XQuAD-format folder end to end (hash embedder, real PostgreSQL)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from bench.evaluation.xquad import half_of, load_xquad

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

PARAGRAPHS = [  # (article, English context, [(qid, English question, German question)])
    ("Travel", "Hotels are reimbursed up to 150 euros per night.",
     [("q1", "How much is reimbursed for hotels?", "Wie viel wird für Hotels erstattet?")]),
    ("Travel", "Economy class is required for flights under six hours.",
     [("q2", "Which class is required for short flights?", "Welche Klasse gilt für kurze Flüge?"),
      ("q3", "Up to how many hours is economy required?", "Bis zu wie vielen Stunden gilt Economy?")]),
    ("Security", "Passwords must be at least 14 characters long.",
     [("q4", "How long must passwords be?", "Wie lang müssen Passwörter sein?")]),
]


def write_xquad(folder, languages=("en", "de"), extra_qid: str | None = None) -> None:
    for lang in languages:
        articles: dict[str, list] = {}
        for title, context, qas in PARAGRAPHS:
            articles.setdefault(title, []).append({"context": context if lang == "en" else f"[{lang}] {context}", "qas": [
                {"id": qid, "question": en if lang == "en" else de, "answers": []} for qid, en, de in qas]})
        if extra_qid and lang != "en":
            articles["Security"][0]["qas"].append({"id": extra_qid, "question": "?", "answers": []})
        data = [{"title": t, "paragraphs": ps} for t, ps in articles.items()]
        (folder / f"xquad.{lang}.json").write_text(json.dumps({"data": data, "version": "1.1"}), encoding="utf-8")


def test_the_english_paragraphs_are_the_corpus_and_ids_give_the_gold(tmp_path):
    write_xquad(tmp_path)
    docs, questions = load_xquad(tmp_path, ["en", "de"])
    assert [d.doc_id for d in docs] == ["xquad-00-00", "xquad-00-01", "xquad-01-00"]
    assert docs[1].text == PARAGRAPHS[1][1] and docs[2].title == "Security"
    assert [(q.qid, q.gold) for q in questions["de"]] == [("q1", "xquad-00-00"), ("q2", "xquad-00-01"), ("q3", "xquad-00-01"),
                                                          ("q4", "xquad-01-00")]
    assert questions["de"][0].text.startswith("Wie viel")
    assert half_of(["q3", "q1", "q4", "q2", "q5"]) == {"q1": "first", "q2": "first", "q3": "second", "q4": "second", "q5": "second"}


def test_a_question_id_unknown_in_english_is_refused(tmp_path):
    write_xquad(tmp_path, extra_qid="q-stray")
    with pytest.raises(ValueError, match="q-stray"):
        load_xquad(tmp_path, ["en", "de"])


def test_missing_files_skip_with_a_message(tmp_path, capsys):
    write_xquad(tmp_path, languages=("en",))
    call_command("evaluate", xquad_dir=tmp_path, out=tmp_path / "out")
    assert "skipped" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_evaluate_xquad_reports_recall_per_model_mode_language_and_half(tmp_path, capsys):
    write_xquad(tmp_path)
    out = tmp_path / "out"
    call_command("evaluate", xquad_dir=tmp_path, xquad_languages="en,de", embedding_model="hash:64", tenant="eval-xquad", out=out)
    report = json.loads((out / "xquad" / "report.json").read_text())
    rows = {(r["mode"], r["language"], r["half"]): r for r in report["rows"]}
    assert len(rows) == 2 * 2 * 3 and {r["model"] for r in report["rows"]} == {"hash:64"}
    assert rows[("vector", "en", "all")]["questions"] == 4 and rows[("vector", "en", "first")]["questions"] == 2
    assert rows[("hybrid", "en", "all")]["recall@10"] == 100.0  # three paragraphs: every one is in the top 10
    assert report["meta"]["documents"] == 3 and report["meta"]["questions_per_language"] == {"en": 4, "de": 4}
    streamed = [json.loads(line) for line in (out / "xquad" / "rows.jsonl").read_text().splitlines()]
    assert streamed == report["rows"]  # written as measured, for an interrupted run
    table = capsys.readouterr().out
    assert "| `hash:64` | vector | all | 4 |" in table and "de−en R@10" in table
    with pytest.raises(CommandError, match="xquad-modes"):
        call_command("evaluate", xquad_dir=tmp_path, xquad_languages="de", xquad_modes="semantic", out=out)
    with pytest.raises(CommandError, match="embedding-model"):
        call_command("evaluate", xquad_dir=tmp_path, xquad_languages="de", embedding_model="no-such-model:3", tenant="eval-xquad",
                     out=out)
