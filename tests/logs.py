"""Log records of every logger while a block runs, at every level, with or without pytest's logging plugin
(`scripts/reliability` runs `-p no:logging`, which takes `caplog` away)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def every_log_record(emit: Callable[[logging.LogRecord], None]) -> Iterator[None]:
    """Call `emit` with each record any logger emits inside the block (the root logger at DEBUG meanwhile)."""

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            emit(record)

    handler, root = Collect(level=logging.DEBUG), logging.getLogger()
    saved = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved)
