"""How the offline provider's extractive answers are written: a tool result's text unwrapped, a
sentence as quoted, and a numbered part with its cited quotes. Shared by agents.providers.offline
and agents.providers.offline_documents, so a quote reads the same in every answer."""

from __future__ import annotations

import re
from collections.abc import Sequence

from agents.sufficiency import SeenChunk

__all__ = ["part_lines", "shown", "source_of", "unwrap"]

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


def part_lines(number: int, part: str, picked: Sequence[tuple[str, int]], chunks: Sequence[SeenChunk]) -> str:
    """One numbered part of an extractive answer and its quotes, each cited and followed by its source."""
    quotes = "\n".join(f'   - "{shown(s)}" [c:{cid}]{source_of(cid, chunks)}' for s, cid in picked)
    heading = part.strip()
    return f"{number}. {heading[:1].upper()}{heading[1:]}:\n{quotes}"
