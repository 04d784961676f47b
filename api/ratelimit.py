"""Rate limits: requests per minute per caller, agent runs per tenant per UTC day.

Both are fixed-window counters consumed atomically: in Redis by one Lua script (check, INCR and
PEXPIRE in a single round trip, so concurrent workers can't overshoot), or, with no Redis
configured (the embedded default), in the Django cache. A rejected request does not consume.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from rest_framework import throttling

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


@dataclass(frozen=True)
class Decision:
    allowed: bool
    count: int
    retry_after: int  # seconds until the window resets


@functools.cache
def _redis(url: str):
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return client, client.register_script(_CONSUME)


def consume(key: str, limit: int, window_seconds: int, reset_in: float | None = None) -> Decision:
    """Take one unit from `key`'s window unless `limit` is reached. `reset_in`: seconds left in the window."""
    ttl_ms = max(1, int((reset_in if reset_in is not None else window_seconds) * 1000))
    url = settings.RATE_LIMIT_REDIS_URL
    if url:
        _, script = _redis(url)
        allowed, count, pttl = script(keys=[key], args=[limit, ttl_ms])
        return Decision(bool(allowed), int(count), max(1, math.ceil((pttl if pttl > 0 else ttl_ms) / 1000)))
    return _consume_cache(key, limit, ttl_ms)


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


def caller_id(request) -> str:
    """The identity a per-caller limit counts: the key's public id or the signed-in user."""
    from api.auth import Principal

    user = request.user
    if isinstance(user, Principal):
        return user.scope.principal
    return f"user:{getattr(user, 'pk', 'anon')}"


class PerKeyRateThrottle(throttling.BaseThrottle):
    """RATE_LIMIT_PER_MINUTE requests per caller per minute; 429 + Retry-After beyond."""

    def allow_request(self, request, view) -> bool:
        limit = settings.RATE_LIMIT_PER_MINUTE
        if limit <= 0 or not getattr(request.user, "is_authenticated", False):
            return True
        now = time.time()
        window = int(now // 60)
        decision = consume(f"rl:{caller_id(request)}:{window}", limit, 60, reset_in=(window + 1) * 60 - now)
        self._wait = decision.retry_after
        return decision.allowed

    def wait(self) -> float | None:
        return getattr(self, "_wait", None)


def daily_run_limit(tenant_settings: dict) -> int:
    """The tenant's agent-run budget per UTC day (0 = unlimited)."""
    try:
        return int(tenant_settings.get("daily_runs", settings.DEFAULT_DAILY_RUNS) or 0)
    except (TypeError, ValueError):
        return settings.DEFAULT_DAILY_RUNS


def consume_daily_run(tenant_id: int, limit: int) -> Decision:
    """Count one agent run against the tenant's budget for today (UTC)."""
    if limit <= 0:
        return Decision(True, 0, 0)
    now = datetime.now(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    return consume(f"runs:{tenant_id}:{now:%Y%m%d}", limit, 86400, reset_in=(midnight - now).total_seconds())
