"""The relevance judge: the learned model (kb.relevance) applied to a run's evidence. Pure but for the
model, except `reranked`, which records its model call as a step of the run.

Three judgements, one model, one set of calibrated thresholds (kb.relevance.calibration):

- `rerank`: a candidate pool (the fused results of a strategy's searches) ordered by how well each
  passage answers the whole question, before the context is cut to its size.
- `judge_question`: how well the best passage of the pool answers the whole question (a question
  of one part asking for a person, a place, a year or a number is not answered by a passage
  without one), and per part of the question (agents.lexical.split_question) the sentences of the
  evidence that best answer it, each scored by the model. `Judgement.settled` decides with the
  calibrated thresholds whether the question is answered: the best passage must reach `answers`
  for an answer the word rules found to stand, and `sure` for the model to answer on its own.
  Calibrated on the fit halves of four question sets (docs/evaluation.md, "Relevance
  calibration"), the whole question's best passage separated answerable from unanswerable
  questions better than any combination of the parts' sentence scores: the parts of a long
  question are fragments ("its performance claims") a model cannot judge alone.
- the same scores pick what an extractive answer quotes (agents.providers.offline), and its second
  hop (`hop_quote`): a sentence of the text a quote names, read after the quote.

A strategy's candidate pool made into a context (the judge's first use): `pool_size` is how many
candidates a strategy hands over (the context's size, or the rerank's POOL when a model reranks);
`reranked` is their order after the model has read them (`rerank`), fused with the strategy's own
order (reciprocal rank, CONTEXT_RRF_K) and traced as a `rerank` model-call step with its cost.
Without a relevance model the pool is the context's size and its order is the strategy's own.

A passage is read with its document's title in front ("Travel policy: Hotel stays are ..."): a
ranking may lean on it. A sentence is judged on its own words: with the title in front, a header
line ("Owner: Security Team.") under a title naming the company reads as an answer to "Who is the
CEO of <company>?" (0.87 against 0.00 alone). Flagged chunks (instructions to a
model found at ingest) are never evidence. With the model set to `none`, `enabled()` is False and the
callers keep their word-overlap rules.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents import sufficiency
from agents.lexical import looks_like_instructions, mentions, sentences, split_question, terms
from agents.planning import fuse
from agents.steps import RunState, StepRecord, relevance_cost_since, relevance_cost_snapshot
from agents.sufficiency import SeenChunk, answer_kind, holds_answer_kind, passage_holds_answer_kind, seen_chunk
from kb import relevance
from tenants.conf import product_settings

POOL = 12  # candidates a rerank reads (the context keeps the best max_context_chunks of them)
PASSAGE_WORDS = 80  # words of a chunk a rerank reads at most (the window that holds most of the query's terms)
TOP_PASSAGES = 3  # the whole question's best passages whose every sentence a part's judgement reads
WORD_CANDIDATES = 6  # besides them, the sentences sharing most words with the part
MAX_CANDIDATES = 16  # sentences scored per part at most
CONTEXT_RRF_K = 60  # reciprocal-rank constant of every fusion of a context's lists


def enabled() -> bool:
    return relevance.enabled()


def model_name() -> str:
    current = relevance.model()
    return current.name if current is not None else "none"


def passage(chunk: SeenChunk, query: str) -> str:
    """A chunk as the model reads it for `query`: its document's title, then its text, or, for a
    chunk longer than PASSAGE_WORDS, the run of consecutive sentences within that many words that
    holds most of the query's terms (the earliest on a tie). A cross-encoder's cost grows with the
    tokens it reads, and a long chunk answers a query in one place."""
    text = chunk.text
    if len(text.split()) > PASSAGE_WORDS:
        text = _best_window(sentences(text) or [text], terms(query))
    return f"{chunk.title}: {text}" if chunk.title else text


def _best_window(said: list[str], wanted: set[str]) -> str:
    sizes = [len(s.split()) for s in said]
    held = [wanted & terms(s) for s in said]  # each sentence read once, not once per window holding it
    best, best_hits = "", -1
    for start in range(len(said)):
        words, end, hits = 0, start, set()
        while end < len(said) and (end == start or words + sizes[end] <= PASSAGE_WORDS):
            words += sizes[end]
            hits |= held[end]
            end += 1
        if len(hits) > best_hits:
            best, best_hits = " ".join(said[start:end]), len(hits)
    return " ".join(best.split()[: PASSAGE_WORDS * 2])


def rerank(question: str, chunks: Sequence[SeenChunk]) -> list[tuple[int, float]]:
    """(chunk id, probability that it answers `question`) for the first POOL chunks, best first
    (ties keep the given order); flagged chunks are scored like the others: a ranking is not a quote."""
    pool = list(chunks)[:POOL]
    if not pool:
        return []
    scores = relevance.score(question, [passage(c, question) for c in pool])
    order = sorted(range(len(pool)), key=lambda i: (-scores[i], i))
    return [(pool[i].chunk_id, scores[i]) for i in order]


@dataclass(frozen=True)
class Quote:
    sentence: str
    chunk_id: int
    score: float


@dataclass
class PartJudgement:
    """One part of a question: its candidate sentences scored against it, best first."""

    part: str
    quotes: list[Quote] = field(default_factory=list)

    @property
    def best(self) -> float:
        return self.quotes[0].score if self.quotes else 0.0

    @property
    def answered(self) -> bool:
        """Some sentence answers the part well enough to be quoted for it (the calibrated `quote` floor)."""
        return self.best >= relevance.calibration().quote


@dataclass
class Judgement:
    """A question judged against its evidence: how well the best passage answers the whole of it,
    and each part's sentences."""

    question: str
    passage: float
    parts: list[PartJudgement]

    def settled(self, found_by_words: bool) -> bool:
        return settles(self.passage, found_by_words)

    @property
    def missing(self) -> list[str]:
        return [p.part for p in self.parts if not p.answered]


def _quotable(sentence: str) -> bool:
    return len(sentence.split()) >= 3 and not looks_like_instructions(sentence)


def _candidates(part: str, chunks: Sequence[SeenChunk], leading: Sequence[int]) -> list[tuple[str, SeenChunk]]:
    """The sentences a part's judgement reads: every sentence of the leading passages, then the
    sentences elsewhere sharing most of the part's words; at most MAX_CANDIDATES, no duplicates."""
    by_id = {c.chunk_id: c for c in chunks if not c.flagged}
    out: dict[str, SeenChunk] = {}
    for cid in leading:
        chunk = by_id.get(cid)
        for s in sentences(chunk.text) if chunk else ():
            if _quotable(s):
                out.setdefault(s, chunk)  # type: ignore[arg-type]
    want = terms(part)
    overlap: list[tuple[int, int, str, SeenChunk]] = []
    for chunk in by_id.values():
        if chunk.chunk_id in leading:
            continue
        for s in sentences(chunk.text):
            shared = len(want & (terms(s) | terms(chunk.title)))
            if shared and _quotable(s) and s not in out:
                overlap.append((-shared, len(overlap), s, chunk))
    for _neg, _i, s, chunk in sorted(overlap)[:WORD_CANDIDATES]:
        out.setdefault(s, chunk)
    return list(out.items())[:MAX_CANDIDATES]


def judge_part(part: str, chunks: Sequence[SeenChunk], leading: Sequence[int]) -> PartJudgement:
    """`part`'s candidate sentences scored by the model, best first."""
    candidates = _candidates(part, chunks, leading)
    if not candidates:
        return PartJudgement(part, [])
    scores = relevance.score(part, [s for s, _c in candidates])
    # A part asking for a kind of answer (a person, a place, a year, a number) is not answered by a
    # sentence without one, however close its words: "Applies to all employees of <company>." to
    # "Who is the CEO of <company>?" scores 0.86.
    kind = answer_kind(part)
    quotes = sorted((Quote(s, c.chunk_id, p if holds_answer_kind(kind, s, part) else 0.0)
                     for (s, c), p in zip(candidates, scores, strict=True)), key=lambda q: -q.score)
    return PartJudgement(part, quotes)


HOP_CANDIDATES = 24  # sentences of the texts a quote links to, scored as its second hop at most


def hop_quote(part: str, picked: Sequence[tuple[str, int]], chunks: Sequence[SeenChunk], used: set[str]) -> Quote | None:
    """The second hop of a part answered through a name: a part asking something of a thing its
    first quote only names ("... king of the Sasanian Empire" for "an empire that succeeded which
    empire?") is answered by the text about that thing. `picked`: the part's quotes so far
    (sentence, chunk id), the first one leading; `used`: sentences quoted for other parts.

    The texts the first quote links to are the chunks of other documents whose title (without its
    qualifier) it names; their sentences are read after it, as one passage, by the model, and the
    best is quoted when that reading scores the part at least as high as the first quote alone (what
    it adds does not lead away from what was asked). None when the first quote holds every word of
    the part, links to no text, no sentence adds to it, or the best is quoted already."""
    first, first_chunk_id = picked[0]
    want = terms(part)
    if not want - terms(first):
        return None
    candidates = [(s, c) for c in _linked(first, first_chunk_id, chunks) for s in sentences(c.text)
                  if s not in used and s != first and _quotable(s)]
    candidates.sort(key=lambda x: -len(want & terms(x[0])))
    candidates = candidates[:HOP_CANDIDATES]
    if not candidates:
        return None
    alone, *joined = relevance.score(part, [first, *(f"{first} {s}" for s, _c in candidates)])
    best = max(range(len(candidates)), key=lambda i: joined[i])
    sentence, chunk = candidates[best]
    if joined[best] < alone or any(sentence == s for s, _cid in picked):
        return None
    return Quote(sentence, chunk.chunk_id, joined[best])


def reaches_named_text(picked: Sequence[Quote], chunks: Sequence[SeenChunk]) -> bool:
    """Does a quote after the first come from the text about a thing the first names (a chunk of
    another document whose title it names: `hop_quote`'s link)?"""
    if len(picked) < 2:
        return False
    linked = {c.chunk_id for c in _linked(picked[0].sentence, picked[0].chunk_id, chunks)}
    return any(q.chunk_id in linked for q in picked[1:])


def _linked(sentence: str, chunk_id: int, chunks: Sequence[SeenChunk]) -> list[SeenChunk]:
    """The texts a quote links to: the chunks of other documents (not flagged) whose title it names."""
    own = next((c.title for c in chunks if c.chunk_id == chunk_id), "")
    return [c for c in chunks if not c.flagged and c.title and c.title != own and _names_title(sentence, c.title)]


def _names_title(sentence: str, title: str) -> bool:
    """Does `sentence` name the thing `title` is about (its title without a qualifier, as whole words)?"""
    name = sufficiency.plain_title(title)
    return len(name) > 2 and mentions(sentence, name)


def settles(passage: float, found_by_words: bool) -> bool:
    """Is the question answered, the word rules' finding and the model's together: an answer the
    words found stands when the best passage reaches the calibrated `answers` threshold (the model
    overrules word overlap that answers nothing); with none found by words, the model's own answer
    needs the best passage at `sure`."""
    calibrated = relevance.calibration()
    return passage >= (calibrated.answers if found_by_words else calibrated.sure)


def best_passage(question: str, chunks: Sequence[SeenChunk]) -> tuple[list[tuple[int, float]], float]:
    """The pool ranked for `question` (`rerank`) and its best passage's score; for a question of one
    part asking for a kind of answer, 0 when no sentence of that passage holds one
    (agents.sufficiency.passage_holds_answer_kind: a header's title line and labelled fields about
    something else name no person, however high the title naming the question's subject lifts the
    passage's score)."""
    ranked = rerank(question, chunks)
    parts = split_question(question)
    top = next((c for c in chunks if ranked and c.chunk_id == ranked[0][0]), None)
    fits = top is not None and (len(parts) != 1 or passage_holds_answer_kind(answer_kind(parts[0]), top.text, parts[0]))
    return ranked, ranked[0][1] if fits else 0.0


def judge_question(question: str, chunks: Sequence[SeenChunk]) -> Judgement:
    """`question` judged against `chunks` (the pool's order decides the leading passages)."""
    ranked, passage = best_passage(question, chunks)
    leading = [cid for cid, _ in ranked[:TOP_PASSAGES]]
    return Judgement(question, passage, [judge_part(part, chunks, leading) for part in split_question(question)])


def tracing() -> bool:
    """Is GROUNDED_JUDGE_TRACE set (the offline provider then also works out, for the trace, what it
    would answer under other thresholds)?"""
    return bool(product_settings.GROUNDED_JUDGE_TRACE)


def trace(judged: Judgement, found_by_words: bool, *, anchored: bool, pinned: int = 0, converged: bool = False,
          own_declines: bool = False) -> None:
    """With GROUNDED_JUDGE_TRACE set, append the scores an answer was decided on, whether the word
    rules had found one, whether the evidence holds the question's names and how many it pins down
    (agents.anchors), whether the parts' sentences converge on a name (agents.consensus) and whether
    the model's own picks, composed, decline (`own_declines`: no part quoted, a side unanswered,
    a described thing never reached) (JSON lines), for calibrating the thresholds
    (bench/calibrate_relevance.py). The last two are worked out whatever the thresholds decided, so
    that a replay under other thresholds makes the decision the provider would."""
    if path := product_settings.GROUNDED_JUDGE_TRACE:
        line = {"question": judged.question, "best_passage": judged.passage, "found_by_words": found_by_words,
                "anchored": anchored, "pinned": pinned, "converged": converged, "own_declines": own_declines,
                "parts": [{"part": j.part, "best": j.best} for j in judged.parts]}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def open_parts(question: str, chunks: Sequence[SeenChunk]) -> list[str]:
    """The parts of `question` no sentence of `chunks` answers: by the model when one is configured,
    else by words (agents.sufficiency.open_parts). The run stores them as its `missing`."""
    if not enabled():
        return sufficiency.open_parts(question, list(chunks))
    return judge_question(question, chunks).missing


def unsupported_parts(question: str, answer: str, cited: Sequence[SeenChunk], retrieved: Sequence[SeenChunk]) -> list[str]:
    """The parts of a multi-part `question` the answer speaks to without a cited chunk that answers
    them (then the answer is `unverified`): by the model when one is configured (no sentence of
    the cited chunks reaches the threshold for the part), else by words (agents.sufficiency.unsupported_parts)."""
    lexical = sufficiency.unsupported_parts(question, answer, list(cited), list(retrieved))
    if not enabled() or not lexical:
        return lexical
    leading = [c.chunk_id for c in cited]
    return [part for part in lexical if not judge_part(part, cited, leading).answered]


def reranked(state: RunState, chunk_ids: list[int]) -> list[int]:
    """`chunk_ids` (a strategy's candidate pool, best first) reordered with the relevance model
    (`rerank`) when one is configured, traced as a `rerank` model-call step with its cost;
    unchanged without one. The pool's first POOL candidates are read; the rest keep their place after them."""
    if not enabled() or not chunk_ids:
        return chunk_ids
    pool = [c for c in chunk_ids if c in state.retrieved][:POOL]
    before = relevance_cost_snapshot()
    started = time.perf_counter()
    order = rerank(state.question, [seen_chunk(state.retrieved[c]) for c in pool])
    step = StepRecord(ordinal=len(state.steps), kind="model_call", name="rerank",
                      arguments={"model": model_name(), "candidates": pool, **relevance_cost_since(before)},
                      chunk_ids=[cid for cid, _ in order], output=json.dumps([[cid, round(p, 4)] for cid, p in order]),
                      latency_ms=(time.perf_counter() - started) * 1000)
    state.record(step)
    # The model's order fused with the strategy's (reciprocal rank): a passage that answers the whole
    # question rises, and one the strategy placed for a part or a hop (which the whole question's
    # reading ranks low) is not cut for it.
    head = fuse([pool, [cid for cid, _ in order]], rrf_k=CONTEXT_RRF_K, key=lambda c: c)
    read = set(head)
    return [*head, *(c for c in chunk_ids if c not in read)]


def pool_size(state: RunState) -> int:
    """How many candidates a strategy hands to the context: the context's size, or the rerank's pool when a model reranks."""
    size = state.budgets.max_context_chunks
    return max(size, POOL) if enabled() else size
