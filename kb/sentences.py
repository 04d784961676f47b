"""Sentence vectors: a second, finer embedding of each chunk, used to re-rank search candidates.

A chunk vector averages ~150 words, so a question that paraphrases one sentence of a long chunk
matches it weakly; the same model applied to that sentence alone matches it well. Corpora with
`sentence_vectors` on store one vector per sentence of every chunk (kb_chunk_sentence, written in
the same transaction as the chunks, removed with them by the database's ON DELETE CASCADE).
`search(..., rerank=True)` then takes the hybrid candidates and fuses their rank with the rank of
their best-matching sentences (the mean of a chunk's two nearest sentences to the query).

Measured on the MultiHop-RAG dev set (docs/evaluation.md): evidence recall of per-publisher
searches +3 to +4 points at 10 chunks of context; re-ranking by sentences alone was worse than
the hybrid ranking, the fusion of both better than either.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A sentence ends at . ! ? or … (closing quotes and brackets may follow) before whitespace and a
# capital, digit or opening quote; a line break always ends one.
_BOUNDARY = re.compile(r"(?:(?<=[.!?\u2026])|(?<=[.!?\u2026][\"'\u201d\u2019)\]]))\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9])|\n+")
MIN_CHARS = 16  # shorter pieces ("Photo: AP.") are kept with nothing: they match every query a little
TOP_SENTENCES = 2  # a chunk's sentence score: the mean similarity of its nearest this-many sentences


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text` worth a vector, in order; the whole text when none is."""
    spans: list[tuple[int, int]] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e - s >= MIN_CHARS:
            out.append((s, e))
    return out or ([(0, len(text))] if text.strip() else [])


def fuse(base_ids: Sequence[int], sentence_scores: dict[int, float], *, rrf_k: float,
         sentence_weight: float = 1.0) -> list[int]:
    """Reciprocal-rank fusion of the candidates' order with their order by sentence score.

    A candidate without sentence vectors keeps its own rank on the sentence side too, so corpora
    without them are neither promoted nor demoted.
    """
    by_score = sorted((cid for cid in base_ids if cid in sentence_scores), key=lambda c: (-sentence_scores[c], c))
    slots = iter(sorted(i for i, cid in enumerate(base_ids) if cid in sentence_scores))
    sentence_rank = {cid: next(slots) for cid in by_score}  # scored candidates share the scored ranks
    fused = {cid: 1.0 / (rrf_k + i) + sentence_weight / (rrf_k + sentence_rank.get(cid, i))
             for i, cid in enumerate(base_ids)}
    return sorted(base_ids, key=lambda c: (-fused[c], base_ids.index(c)))
