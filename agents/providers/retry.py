"""Retry with exponential backoff for model calls: 429, 5xx, transport errors and unreadable replies;
and the run's deadline as every provider applies it to one call (time_left, check_reply_deadline)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from agents.messages import DeadlineExceeded, ProviderError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Retryable(Exception):
    """A failure worth another attempt (rate limit, server error, garbled reply)."""


def time_left(timeout_s: float, deadline: float | None) -> float:
    """Seconds one model call may take: `timeout_s`, never past `deadline` (a time.monotonic() value,
    the run's wall budget); DeadlineExceeded when none is left."""
    left = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
    if left <= 0:
        raise DeadlineExceeded("the run's wall budget is spent: no time left for a model call")
    return left


def check_reply_deadline(deadline: float | None) -> None:
    """Between two pieces of a streamed reply: DeadlineExceeded once `deadline` has come (the caller
    then closes the stream, which abandons the call)."""
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineExceeded("the run's wall budget ran out while the model was still replying: the call was abandoned")


# Not shared with kb/embedding.py's retry loop on purpose: kb may not import agents; ingestion jitters (workers share a quota), no deadline.
def with_retries(fn: Callable[[], T], *, attempts: int, backoff_s: float, classify: Callable[[Exception], bool],
                 sleep: Callable[[float], None] = time.sleep, max_backoff_s: float = 30.0, what: str = "model call",
                 deadline: float | None = None) -> T:
    """Call `fn` up to `attempts` times, sleeping backoff_s * 2**n between tries when `classify(exc)` says retry.

    No retry starts after `deadline` (a time.monotonic() value: the run's wall budget). Raises
    ProviderError with the last cause when attempts run out or the error is permanent.
    """
    last: Exception | None = None
    for attempt in range(max(1, attempts)):
        try:
            return fn()
        except ProviderError:
            raise
        except Exception as exc:
            last = exc
            if not classify(exc):
                raise ProviderError(f"{what} failed: {type(exc).__name__}: {str(exc)[:500]}") from exc
            if attempt + 1 < attempts:
                delay = min(backoff_s * (2**attempt), max_backoff_s)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise ProviderError(f"{what} failed and the run's time budget leaves no room to retry: "
                                        f"{type(exc).__name__}: {str(exc)[:500]}") from exc
                log.warning("%s failed (%s), retrying in %.1fs", what, type(exc).__name__, delay)
                sleep(delay)
    raise ProviderError(f"{what} failed after {attempts} attempts: {type(last).__name__}: {str(last)[:500]}") from last
