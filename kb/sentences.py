"""Sentence vectors: a second, finer embedding of each chunk, used to re-rank search candidates.

A chunk vector averages ~150 words, so a question that paraphrases one sentence of a long chunk
matches it weakly; the same model applied to that sentence alone matches it well. Corpora with
`sentence_vectors` on store one vector per sentence of every chunk (kb_chunk_sentence, written in
the same transaction as the chunks, removed with them by the database's ON DELETE CASCADE).
`search(..., rerank=True)` then takes the hybrid candidates and fuses their rank with two ranks of
their sentences: by vector (the mean of a chunk's two nearest sentences to the query) and by terms
(the best sentence's sum of idf over the query lexemes it holds; ChunkSentence.lexemes). A fact a
question paraphrases sits in one sentence: its terms co-occur there, while a chunk's BM25 counts
them wherever they are.

The sentence ranks are fused with the candidates' own order, never used alone: alone they rank
worse than the hybrid order, fused better than either (figures: docs/retrieval.md, "Sentence
re-rank", and docs/evaluation.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from kb.fusion import rrf_scores
from kb.sentence_split import split

MIN_CHARS = 16  # shorter pieces ("Photo: AP.") are kept with nothing: they match every query a little
TOP_SENTENCES = 2  # a chunk's sentence score: the mean similarity of its nearest this-many sentences


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text` worth a vector, in order; the whole text when none is.

    Sentences and headings as `kb.sentence_split.split` finds them (exact slices, never cut inside a
    figure, abbreviation or quotation), those shorter than MIN_CHARS left out."""
    out = [(s, e) for s, e, _ in split(text) if e - s >= MIN_CHARS]
    return out or ([(0, len(text))] if text.strip() else [])


def fuse(base_ids: Sequence[int], by_vector: dict[int, float], by_terms: dict[int, float] | None = None, *,
         rrf_k: float) -> list[int]:
    """Reciprocal-rank fusion of the candidates' order with their order by each sentence score.

    Ties in a sentence score keep the candidates' own order (term sums tie often). A candidate
    without sentences keeps its own rank on the sentence sides too, so corpora without them are
    neither promoted nor demoted.
    """
    base_rank = {cid: i for i, cid in enumerate(base_ids)}
    orders: list[tuple[Sequence[int], float]] = [(list(base_ids), 1.0)]
    for scores in (by_vector, by_terms):
        if scores is None:
            continue
        by_score = sorted((cid for cid in base_ids if cid in scores), key=lambda c: (-scores[c], base_rank[c]))
        order = list(base_ids)
        for slot, cid in zip(sorted(base_rank[c] for c in by_score), by_score, strict=True):
            order[slot] = cid  # scored candidates share the scored ranks; the rest keep theirs
        orders.append((order, 1.0))
    fused = rrf_scores(orders, rrf_k=rrf_k)
    return sorted(base_ids, key=lambda c: (-fused[c], base_rank[c]))
