"""An answer's text handed out as it is produced (the chat's `text` events), before the run is stored.

A sink is `sink(delta, reset)`: `delta` is the next piece of the answer being written (a sentence or
a line); `reset` is True on the first piece of each new attempt (a retried or repaired answer, or a
composer that changed its mind), telling the reader to drop what it has shown so far. What is
streamed is a draft: the stored run's answer (its `answer` and `done` events) is the one that counts.

`TextStream` is one model call's stream. A provider that produces text piece by piece calls
`send` as it goes (the offline provider, part by part and quote by quote, as its composer picks
them); when the call returns, `finish(text)` reconciles: the rest of the text is sent, or, when the
final text does not continue what was sent, it is sent again from a reset. A provider that does not
stream is thereby streamed sentence by sentence once its reply is in. Pure: no ORM, no I/O.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

TextSink = Callable[[str, bool], Any]

# A piece ends after a line break, or after a sentence's end followed by a space.
_PIECE = re.compile(r"[^\n]*?(?:[.!?](?=\s)\s*|\n+|$)")
_LIST_NUMBER = re.compile(r"\s*\d+\.\s*")


def pieces(text: str) -> list[str]:
    """`text` cut into sentences and lines, each with the whitespace that follows it; joined, they are `text`.
    A list item's number ("2. ") stays with its item."""
    out: list[str] = []
    for piece in _PIECE.findall(text):
        if piece and out and _LIST_NUMBER.fullmatch(out[-1]):
            out[-1] += piece
        elif piece:
            out.append(piece)
    return out


class TextStream:
    """One model call's text, as sent to `sink` so far (`sent`)."""

    def __init__(self, sink: TextSink) -> None:
        self.sink = sink
        self.sent = ""

    def send(self, piece: str) -> None:
        """Hand out the next piece of the text (the first one of this stream resets the reader)."""
        if not piece:
            return
        reset = not self.sent
        self.sent += piece
        self._emit(piece, reset)

    def finish(self, text: str) -> None:
        """The call's whole text is known: send what is not sent yet, from a reset when it does not
        continue what was sent."""
        head = self.sent.strip()  # a provider's reply is stripped once whole: whitespace around is no change
        if self.sent and not text.startswith(head):
            self.sent = head = ""
        rest = text[len(head):]
        if self.sent and rest[:1].isspace() and self.sent[-1:].isspace():
            rest = rest.lstrip()  # the whitespace after the head was sent already
        for piece in pieces(rest):
            self.send(piece)

    def clear(self) -> None:
        """The call produced no answer text after all (it called tools): drop what was sent."""
        if self.sent:
            self.sent = ""
            self._emit("", True)

    def _emit(self, piece: str, reset: bool) -> None:
        try:
            self.sink(piece, reset)
        except Exception:  # a reader that went away must not fail the run
            log.warning("text sink failed", exc_info=True)
