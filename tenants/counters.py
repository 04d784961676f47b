"""Fixed-window counters for limits: the storage under the per-caller limits (tenants.limits) and the
tenant's daily run budget (agents.budgets).

A counter is consumed atomically: in Redis (RATE_LIMIT_REDIS_URL) by one Lua script (check, INCR and
PEXPIRE in a single round trip, so concurrent workers can't overshoot), or, with no Redis configured
(the embedded default), in the Django cache. A refused unit is not consumed.

When the Redis is unreachable (down, restarting, timing out) limits keep working: a limit is a guard
rail, not a reason to take every request down with a 500. The one fallback (`_on_redis`):

* the counter falls back to the Django cache for `REDIS_RETRY_SECONDS`, then Redis is tried again, so
  recovery needs no restart and a dead Redis costs no connect timeout per request. Limits stay
  enforced, per cache (per process with the local-memory cache; the windows restart from zero, so a
  caller may get up to one extra window's worth during the switch);
* a warning is logged at most once per `WARN_INTERVAL_SECONDS`, not once per request;
* if the Django cache fails too (e.g. it lives on the same Redis): a fail-open counter allows the unit
  (warning logged); a fail-closed one (the daily run budget, which caps spending) raises
  `CounterUnavailable`, which the edges answer with 503 + Retry-After, never a 500.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from django.core.cache import cache

from tenants.conf import product_settings

logger = logging.getLogger(__name__)

REDIS_RETRY_SECONDS = 5.0  # after a Redis error, count in the Django cache this long before trying Redis again
WARN_INTERVAL_SECONDS = 60.0  # at most one outage warning per interval and kind
MAX_REMEMBERED = 20  # members `remember` keeps per set

_state_lock = threading.Lock()
_redis_down_until: dict[str, float] = {}  # Redis URL -> monotonic time before which it is not tried
_last_warning: dict[str, float] = {}
_NO_REDIS = object()  # what _on_redis returns when the caller must use the Django cache


class RetryLater(Exception):  # noqa: N818  (a refusal, not a fault: the name says what the caller should do)
    """A limit refuses the call for now: retry after `retry_after` seconds. The message says which limit."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class CounterUnavailable(RetryLater):
    """Neither Redis nor the Django cache could count a fail-closed limit (the edges: 503 + Retry-After)."""

    def __init__(self, retry_after: int = 30):
        super().__init__("rate-limit storage is unavailable, retry shortly", retry_after)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    count: int
    retry_after: int  # seconds until the window resets


_CONSUME = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit = tonumber(ARGV[1])
if current >= limit then
  return {0, current, redis.call('PTTL', KEYS[1])}
end
current = redis.call('INCR', KEYS[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return {1, current, redis.call('PTTL', KEYS[1])}
"""


def _warn(kind: str, message: str, *args: Any) -> None:
    now = time.monotonic()
    with _state_lock:
        if now - _last_warning.get(kind, -WARN_INTERVAL_SECONDS) < WARN_INTERVAL_SECONDS:
            return
        _last_warning[kind] = now
    logger.warning(message, *args)


@functools.cache
def _redis(url: str):
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return client, client.register_script(_CONSUME)


def _on_redis(work: Callable[[Any, Any], Any]) -> Any:
    """`work(client, consume_script)` on the counters' Redis; `_NO_REDIS` when none is configured, it is
    resting after an error, or `work` just failed on it (then it rests REDIS_RETRY_SECONDS, one warning
    per interval). The one Redis-down fallback: every caller then counts in the Django cache."""
    url = product_settings.RATE_LIMIT_REDIS_URL
    if not url or time.monotonic() < _redis_down_until.get(url, 0.0):
        return _NO_REDIS
    try:
        return work(*_redis(url))
    except redis.RedisError as exc:
        with _state_lock:
            _redis_down_until[url] = time.monotonic() + REDIS_RETRY_SECONDS
        _warn("redis", "rate-limit Redis unavailable (%s: %s): counting in the Django cache, retrying Redis every %ss",
              type(exc).__name__, exc, REDIS_RETRY_SECONDS)
        return _NO_REDIS


def _cache_failed(exc: Exception) -> Decision:
    _warn("cache-open", "rate-limit fallback cache unavailable (%s: %s): allowing requests without a per-key limit",
          type(exc).__name__, exc)
    return Decision(True, 0, 1)


def consume(key: str, limit: int, window_seconds: int, reset_in: float | None = None, fail_open: bool = True) -> Decision:
    """Take one unit from `key`'s window unless `limit` is reached. `reset_in`: seconds left in the window.

    Redis errors fall back to the Django cache (module docstring); if that fails too, `fail_open`
    allows the unit, otherwise CounterUnavailable is raised."""
    ttl_ms = max(1, int((reset_in if reset_in is not None else window_seconds) * 1000))

    def on_redis(client, script) -> Decision:
        allowed, count, pttl = script(keys=[key], args=[limit, ttl_ms])
        return Decision(bool(allowed), int(count), max(1, math.ceil((pttl if pttl > 0 else ttl_ms) / 1000)))

    decision = _on_redis(on_redis)
    if decision is not _NO_REDIS:
        return decision
    try:
        return _consume_cache(key, limit, ttl_ms)
    except Exception as exc:  # the cache may live on the same Redis
        if fail_open:
            return _cache_failed(exc)
        _warn("cache-closed", "rate-limit fallback cache unavailable (%s: %s): refusing budgeted requests with 503",
              type(exc).__name__, exc)
        raise CounterUnavailable() from exc


def peek(key: str, limit: int, window_seconds: int) -> Decision:
    """Whether `key`'s window still has room, without taking a unit. Storage errors allow (fail open)."""

    def on_redis(client, script) -> Decision:
        with client.pipeline(transaction=False) as pipe:
            count, pttl = pipe.get(key).pttl(key).execute()
        count = int(count or 0)
        return Decision(count < limit, count, max(1, math.ceil((pttl if pttl > 0 else window_seconds * 1000) / 1000)))

    decision = _on_redis(on_redis)
    if decision is not _NO_REDIS:
        return decision
    try:
        return _peek_cache(key, limit, window_seconds)
    except Exception as exc:
        return _cache_failed(exc)


def _consume_cache(key: str, limit: int, ttl_ms: int) -> Decision:
    # The window's end is stored with the counter so Retry-After is exact without a TTL query.
    timeout = math.ceil(ttl_ms / 1000)
    cache.add(f"{key}:end", time.time() + ttl_ms / 1000, timeout)
    cache.add(key, 0, timeout)
    end = cache.get(f"{key}:end") or time.time() + timeout
    retry = max(1, math.ceil(end - time.time()))
    if (cache.get(key) or 0) >= limit:
        return Decision(False, limit, retry)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout)
        count = 1
    if count > limit:
        cache.decr(key)
        return Decision(False, limit, retry)
    return Decision(True, count, retry)


def _peek_cache(key: str, limit: int, window_seconds: int) -> Decision:
    count = cache.get(key) or 0
    end = cache.get(f"{key}:end") or time.time() + window_seconds
    return Decision(count < limit, int(count), max(1, math.ceil(end - time.time())))


def window(prefix: str, subject: str, window_seconds: int) -> tuple[str, int, float]:
    """(counter key of `subject` in the current fixed window, the window's length, seconds until it ends)."""
    window_seconds = max(1, int(window_seconds))
    now = time.time()
    number = int(now // window_seconds)
    return f"{prefix}:{subject}:{number}", window_seconds, (number + 1) * window_seconds - now


def remember(key: str, member: str | None, ttl: float) -> list[str]:
    """Add `member` (if given; at most MAX_REMEMBERED members) to the set at `key`, kept `ttl` seconds
    (Redis, else the Django cache); the set's members, sorted. Fail open: [] when neither can say."""
    ttl_ms = max(1, int(ttl * 1000))

    def on_redis(client, script) -> list[str]:
        with client.pipeline(transaction=False) as pipe:
            if member is not None and client.scard(key) < MAX_REMEMBERED:
                pipe.sadd(key, member).pexpire(key, ttl_ms)
            found = pipe.smembers(key).execute()[-1]
        return sorted(a.decode() if isinstance(a, bytes) else a for a in found)

    try:
        members = _on_redis(on_redis)
        if members is not _NO_REDIS:
            return members
        found = set(cache.get(key) or ())
        if member is not None and member not in found and len(found) < MAX_REMEMBERED:
            found.add(member)
            cache.set(key, sorted(found), math.ceil(ttl_ms / 1000))
        return sorted(found)
    except Exception:  # a detail (for an audit log), never a reason to fail the caller
        return []
