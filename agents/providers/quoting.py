"""How the offline provider's extractive answers are written: a tool result's text unwrapped, a
sentence as quoted, and a numbered part with its cited quotes. Shared by agents.providers.offline
and agents.providers.offline_documents, so a quote reads the same in every answer."""

from __future__ import annotations

import re
from collections.abc import Sequence

from agents.conversation_text import PRONOUN
from agents.lexical import looks_like_instructions, sentences
from agents.sufficiency import SeenChunk

__all__ = ["part_lines", "shown", "source_of", "unwrap", "with_antecedents"]

# A sentence opening with a third-person pronoun ("He was born in Karaj", "Its headquarters are ...")
# says who or what it speaks of only through the sentences before it (the English pronouns
# agents.conversation_text resolves in follow-ups).
_OPENS_WITH_PRONOUN = re.compile(r"^[\"'“‘(]?" + PRONOUN.pattern, re.I)

_BLOCK = re.compile(r"^<document_data[^>]*>\n?(.*?)\n?</document_data>$", re.S)


def unwrap(block: str) -> str:
    """A search result's text without the <document_data> wrapper and the truncation mark."""
    m = _BLOCK.match(block.strip())
    text = m.group(1) if m else block
    return text.removesuffix(" […truncated]")


def shown(sentence: str) -> str:
    """A sentence as quoted: its own double quotes become single ones (quote matching treats every
    quotation mark alike), so they do not end the quotation."""
    return sentence.replace('"', "'").replace("“", "'").replace("”", "'")


def source_of(chunk_id: int, chunks: Sequence[SeenChunk]) -> str:
    """ " (Document title)" after a quote, so a reader sees where it comes from (a paragraph's "It" is its title)."""
    title = next((c.title for c in chunks if c.chunk_id == chunk_id), "")
    return f" ({title})" if title else ""


def with_antecedents(picked: Sequence[tuple[str, int]], chunks: Sequence[SeenChunk]) -> list[tuple[str, int]]:
    """The quotes (sentence, chunk id), each one opening with a third-person pronoun preceded by the
    sentence of its chunk that names what the pronoun stands for: the nearest sentence before it that
    does not itself open with one ("Helen Elizabeth Hunt (born June 15, 1963) is an American actress."
    before "She starred in ..."). A quote read alone must say whom it is about; the document's title
    beside it names the document, not the person or thing a sentence in its middle speaks of. Nothing
    is added for a quote opening its chunk, or when that sentence is quoted already; order is kept."""
    texts = {c.chunk_id: c.text for c in chunks}
    quoted = {s for s, _cid in picked}
    out: list[tuple[str, int]] = []
    for sentence, chunk_id in picked:
        if _OPENS_WITH_PRONOUN.match(sentence) and chunk_id in texts:
            before = _antecedent(sentence, sentences(texts[chunk_id]))
            if before is not None and before not in quoted:
                quoted.add(before)
                out.append((before, chunk_id))
        out.append((sentence, chunk_id))
    return out


def _antecedent(sentence: str, chunk_sentences: list[str]) -> str | None:
    """The nearest sentence before `sentence` in its chunk not opening with a pronoun (None: none, or
    it reads like instructions to a model: such a sentence is never quoted)."""
    at = chunk_sentences.index(sentence) if sentence in chunk_sentences else 0
    for earlier in reversed(chunk_sentences[:at]):
        if not _OPENS_WITH_PRONOUN.match(earlier):
            return None if looks_like_instructions(earlier) else earlier
    return None


def part_lines(number: int, part: str, picked: Sequence[tuple[str, int]], chunks: Sequence[SeenChunk]) -> str:
    """One numbered part of an extractive answer and its quotes, each cited and followed by its
    source; a quote opening with a pronoun comes after the sentence saying what it stands for
    (`with_antecedents`)."""
    quotes = "\n".join(f'   - "{shown(s)}" [c:{cid}]{source_of(cid, chunks)}' for s, cid in with_antecedents(picked, chunks))
    heading = part.strip()
    return f"{number}. {heading[:1].upper()}{heading[1:]}:\n{quotes}"
