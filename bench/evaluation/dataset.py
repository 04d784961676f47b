"""Evaluation inputs: a corpus JSONL and a question JSONL. Pure: no ORM.

Corpus lines: `{"doc_id", "title", "text", ...}`; every other scalar field (source, published_at,
category, url, author, ...) becomes document metadata. `doc_id` defaults to the title.

Question lines: `{"qid", "question", "question_type", "answer", "evidence": [{"doc_id", "fact"}]}`
(the MultiHop-RAG shape). Tenants may instead give `"expected_sources": ["<doc_id or title>", ...]`
when they know which documents answer a question but not the sentences. A question with no
evidence and no expected sources is unanswerable: the right outcome is "not enough evidence"; so
is one marked `"answerability": "unanswerable"` or `"answerable": false`, whatever else it lists.

A question may carry `"history": [{"speaker": "user" | "agent", "text"}, ...]`, the conversation's
earlier turns, oldest first (`--history` replays them; bench.evaluation.history). Other fields are
ignored.

Halves: every question belongs to one half, `fit` or `report`, by a stable hash of its qid alone
(`half_of`), so adding or removing questions never moves another one. Thresholds and rules are
chosen on `fit`; figures are reported on `report`.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.evaluation.metrics import GoldItem

NULL_TYPE = "null_query"
TEXT_FIELDS = ("doc_id", "title", "text", "body")
HALVES = ("fit", "report")
UNANSWERABLE_MARKS = frozenset({"unanswerable", "not answerable", "no", "false"})
SPEAKERS = ("user", "agent")


class DatasetError(ValueError):
    """An input file is malformed; the message names the file and line."""


@dataclass(frozen=True)
class CorpusDoc:
    doc_id: str
    title: str
    text: str
    metadata: dict = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """What re-ingestion compares: text, title and metadata."""
        payload = json.dumps([self.title, self.text, self.metadata], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class Turn:
    """One earlier turn of a question's conversation: who spoke ("user" or "agent") and what."""

    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    question_type: str
    answer: str | None
    gold: tuple[GoldItem, ...]
    history: tuple[Turn, ...] = ()  # earlier turns, oldest first; () for a question asked alone

    @property
    def answerable(self) -> bool:
        return bool(self.gold)


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, row


def load_corpus(path: Path) -> list[CorpusDoc]:
    """Documents in file order; doc ids must be unique."""
    docs: list[CorpusDoc] = []
    seen: set[str] = set()
    for lineno, row in _lines(path):
        text = row.get("text") or row.get("body")
        title = str(row.get("title") or "").strip()
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{path}:{lineno}: a corpus line needs a non-empty 'text'")
        doc_id = str(row.get("doc_id") or title)
        if not doc_id:
            raise DatasetError(f"{path}:{lineno}: a corpus line needs 'doc_id' or 'title'")
        if doc_id in seen:
            raise DatasetError(f"{path}:{lineno}: duplicate doc_id {doc_id!r}")
        seen.add(doc_id)
        metadata = {k: v for k, v in row.items() if k not in TEXT_FIELDS and isinstance(v, str | int | float | bool)}
        docs.append(CorpusDoc(doc_id=doc_id, title=title or doc_id, text=text, metadata=metadata))
    return docs


def load_questions(path: Path, corpus: list[CorpusDoc]) -> list[Question]:
    """Questions in file order; expected sources are resolved to doc ids through `corpus`."""
    by_title = {d.title.casefold(): d.doc_id for d in corpus}
    doc_ids = {d.doc_id for d in corpus}
    questions: list[Question] = []
    for lineno, row in _lines(path):
        text = row.get("question") or row.get("query")
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{path}:{lineno}: a question line needs 'question'")
        gold: list[GoldItem] = []
        for item in row.get("evidence") or row.get("evidence_list") or []:
            fact = item.get("fact") or None
            doc_key = item.get("doc_id") or by_title.get(str(item.get("title", "")).casefold())
            if not fact and not doc_key:
                raise DatasetError(f"{path}:{lineno}: an evidence item needs 'fact' or a known 'doc_id'/'title'")
            gold.append(GoldItem(fact=fact, doc_key=doc_key))
        for name in row.get("expected_sources") or []:
            doc_key = name if name in doc_ids else by_title.get(str(name).casefold())
            if doc_key is None:
                raise DatasetError(f"{path}:{lineno}: expected source {name!r} is not in the corpus")
            gold.append(GoldItem(doc_key=doc_key))
        if _marked_unanswerable(row):
            gold = []  # the set says the corpus cannot answer it: no evidence, so the right outcome is to abstain
        qtype = row.get("question_type") or ("question" if gold else NULL_TYPE)
        answer = row.get("answer")
        questions.append(Question(qid=str(row.get("qid") or f"line-{lineno}"), question=text.strip(), question_type=str(qtype),
                                  answer=str(answer) if answer is not None else None, gold=tuple(gold),
                                  history=_history(row.get("history"), path, lineno)))
    return questions


def _marked_unanswerable(row: dict) -> bool:
    """`"answerability": "unanswerable"` (any case) or `"answerable": false`."""
    mark = row.get("answerability")
    return (isinstance(mark, str) and mark.strip().casefold() in UNANSWERABLE_MARKS) or row.get("answerable") is False


def _history(value: object, path: Path, lineno: int) -> tuple[Turn, ...]:
    """The earlier turns of a question line; empty turns are skipped, an unknown speaker is an error."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise DatasetError(f"{path}:{lineno}: 'history' must be a list of {{speaker, text}} turns")
    turns = []
    for item in value:
        speaker = str(item.get("speaker") or item.get("role") or "").strip().casefold() if isinstance(item, dict) else ""
        speaker = {"assistant": "agent"}.get(speaker, speaker)
        if speaker not in SPEAKERS:
            raise DatasetError(f"{path}:{lineno}: a history turn needs 'speaker' user or agent")
        text = item.get("text")
        if isinstance(text, str) and text.strip():
            turns.append(Turn(speaker=speaker, text=text.strip()))
    return tuple(turns)


def half_of(qid: str) -> str:
    """The half a question belongs to: "fit" when the first byte of sha256(qid) is even, else "report".
    Depends on the qid alone, so it never changes when other questions are added or removed."""
    return HALVES[hashlib.sha256(qid.encode("utf-8")).digest()[0] % 2]


def select_half(questions: list[Question], half: str | None) -> list[Question]:
    """The questions of one half, in file order (all of them for None); an unknown half raises ValueError."""
    if half is None:
        return list(questions)
    if half not in HALVES:
        raise ValueError(f"unknown half {half!r}: use {' or '.join(HALVES)}")
    return [q for q in questions if half_of(q.qid) == half]


def sample_questions(questions: list[Question], *, limit: int | None, seed: int) -> list[Question]:
    """A seeded sample stratified by question type (file order when no limit), so a small run keeps the mix."""
    if limit is None or limit >= len(questions):
        return list(questions)
    rng = random.Random(seed)  # noqa: S311  (a seeded sample, reproducible on purpose: not a secret)
    by_type: dict[str, list[Question]] = {}
    for q in questions:
        by_type.setdefault(q.question_type, []).append(q)
    picked: list[Question] = []
    types = sorted(by_type)
    quotas = {t: len(by_type[t]) * limit // len(questions) for t in types}
    for t in sorted(types, key=lambda t: -len(by_type[t]))[: limit - sum(quotas.values())]:
        quotas[t] += 1  # the remainder goes to the largest types
    for t in types:
        picked.extend(rng.sample(by_type[t], min(quotas[t], len(by_type[t]))))
    order = {q.qid: i for i, q in enumerate(questions)}
    return sorted(picked, key=lambda q: order[q.qid])


def evidence_doc_ids(questions: list[Question]) -> set[str]:
    return {g.doc_key for q in questions for g in q.gold if g.doc_key}
