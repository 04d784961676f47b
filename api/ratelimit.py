"""Rate limits: requests per minute per caller, agent runs per tenant per UTC day, failed API-key
attempts and sign-ins per client address, failed sign-ins per account (the username as typed).

Both are fixed-window counters consumed atomically: in Redis by one Lua script (check, INCR and
PEXPIRE in a single round trip, so concurrent workers can't overshoot), or, with no Redis
configured (the embedded default), in the Django cache. A rejected request does not consume.

When the rate-limit Redis is unreachable (down, restarting, timing out) the API keeps serving: a
rate limit is a guard rail, not a reason to take every request down with a 500. Behaviour:

* the counter falls back to the Django cache (`_consume_cache`) for `REDIS_RETRY_SECONDS`, then
  Redis is tried again, so recovery needs no restart and a dead Redis costs no connect timeout per
  request. Limits stay enforced, per cache (per process with the local-memory cache; the windows
  restart from zero, so a caller may get up to one extra window's worth during the switch);
* a warning is logged at most once per `WARN_INTERVAL_SECONDS`, not once per request;
* if the Django cache fails too (e.g. it lives on the same Redis): the per-caller per-minute limit
  fails open (the request is allowed, warning logged); the tenant's daily agent-run budget, which
  caps spending, fails closed with 503 + Retry-After (`RateLimitUnavailable`), never a 500.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import threading
import time
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import redis
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from rest_framework import status, throttling
from rest_framework.exceptions import APIException
from rest_framework.request import Request

from tenants.models import Tenant
from tenants.scope import Scope

if TYPE_CHECKING:  # rest_framework.views loads the authentication classes, which import this module
    from rest_framework.views import APIView

logger = logging.getLogger(__name__)

REDIS_RETRY_SECONDS = 5.0  # after a Redis error, count in the Django cache this long before trying Redis again
WARN_INTERVAL_SECONDS = 60.0  # at most one outage warning per interval and kind
MAX_REMEMBERED_ADDRESSES = 20  # addresses kept per locked account for the audit log

_state_lock = threading.Lock()
_redis_down_until: dict[str, float] = {}  # Redis URL -> monotonic time before which it is not tried
_last_warning: dict[str, float] = {}


class RateLimitUnavailable(APIException):
    """Neither Redis nor the Django cache could count a fail-closed budget: 503 with Retry-After."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "rate-limit storage is unavailable, retry shortly"
    default_code = "rate_limit_unavailable"
    wait = 30

    def __init__(self, detail=None, code=None, wait: int = 30):
        super().__init__(detail, code)
        self.wait = wait


def _warn(kind: str, message: str, *args) -> None:
    now = time.monotonic()
    with _state_lock:
        if now - _last_warning.get(kind, -WARN_INTERVAL_SECONDS) < WARN_INTERVAL_SECONDS:
            return
        _last_warning[kind] = now
    logger.warning(message, *args)

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
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return client, client.register_script(_CONSUME)


def consume(key: str, limit: int, window_seconds: int, reset_in: float | None = None, fail_open: bool = True) -> Decision:
    """Take one unit from `key`'s window unless `limit` is reached. `reset_in`: seconds left in the window.

    Redis errors fall back to the Django cache (module docstring); if that fails too, `fail_open`
    allows the unit, otherwise `RateLimitUnavailable` (503) is raised."""
    ttl_ms = max(1, int((reset_in if reset_in is not None else window_seconds) * 1000))
    url = settings.RATE_LIMIT_REDIS_URL
    if url and time.monotonic() >= _redis_down_until.get(url, 0.0):
        try:
            _, script = _redis(url)
            allowed, count, pttl = script(keys=[key], args=[limit, ttl_ms])
            return Decision(bool(allowed), int(count), max(1, math.ceil((pttl if pttl > 0 else ttl_ms) / 1000)))
        except redis.RedisError as exc:
            with _state_lock:
                _redis_down_until[url] = time.monotonic() + REDIS_RETRY_SECONDS
            _warn("redis", "rate-limit Redis unavailable (%s: %s): counting in the Django cache, retrying Redis every %ss",
                  type(exc).__name__, exc, REDIS_RETRY_SECONDS)
    try:
        return _consume_cache(key, limit, ttl_ms)
    except Exception as exc:  # the cache may live on the same Redis
        if not fail_open:
            _warn("cache-closed", "rate-limit fallback cache unavailable (%s: %s): refusing budgeted requests with 503",
                  type(exc).__name__, exc)
            raise RateLimitUnavailable() from exc
        _warn("cache-open", "rate-limit fallback cache unavailable (%s: %s): allowing requests without a per-key limit",
              type(exc).__name__, exc)
        return Decision(True, 0, 1)


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


def peek(key: str, limit: int, window_seconds: int) -> Decision:
    """Whether `key`'s window still has room, without taking a unit. Storage errors allow (fail open)."""
    url = settings.RATE_LIMIT_REDIS_URL
    if url and time.monotonic() >= _redis_down_until.get(url, 0.0):
        try:
            client, _ = _redis(url)
            with client.pipeline(transaction=False) as pipe:
                count, pttl = pipe.get(key).pttl(key).execute()
            count = int(count or 0)
            return Decision(count < limit, count, max(1, math.ceil((pttl if pttl > 0 else window_seconds * 1000) / 1000)))
        except redis.RedisError as exc:
            with _state_lock:
                _redis_down_until[url] = time.monotonic() + REDIS_RETRY_SECONDS
            _warn("redis", "rate-limit Redis unavailable (%s: %s): counting in the Django cache, retrying Redis every %ss",
                  type(exc).__name__, exc, REDIS_RETRY_SECONDS)
    try:
        return _peek_cache(key, limit, window_seconds)
    except Exception as exc:
        _warn("cache-open", "rate-limit fallback cache unavailable (%s: %s): allowing requests without a per-key limit",
              type(exc).__name__, exc)
        return Decision(True, 0, 1)


def _window_key(prefix: str, subject: str, window_seconds: int) -> tuple[str, int, float]:
    """(counter key of `subject` in the current fixed window, the window's length, seconds until it ends)."""
    window_seconds = max(1, int(window_seconds))
    now = time.time()
    window = int(now // window_seconds)
    return f"{prefix}:{subject}:{window}", window_seconds, (window + 1) * window_seconds - now


def _locked_out(limit: int, counter: tuple[str, int, float]) -> Decision | None:
    """The lockout when the window's `counter` (see _window_key) used up `limit` (0 or less: no lockout), else None."""
    if limit <= 0:
        return None
    key, window_seconds, _ = counter
    decision = peek(key, limit, window_seconds)
    return None if decision.allowed else decision


def _auth_failure_key(address: str) -> tuple[str, int, float]:
    return _window_key("authfail", address, settings.AUTH_FAILURE_WINDOW_SECONDS)


def auth_failures_exceeded(address: str) -> Decision | None:
    """The lockout of `address` when it used up AUTH_FAILURES_PER_IP failed API-key attempts in
    this window, else None. Checked before a key is looked up, so a locked-out address cannot go
    on guessing and learn which guess was right."""
    return _locked_out(int(settings.AUTH_FAILURES_PER_IP), _auth_failure_key(address))


def record_auth_failure(address: str) -> None:
    """Count one failed API-key attempt from `address` (fail open: a storage outage locks nobody out)."""
    limit = int(settings.AUTH_FAILURES_PER_IP)
    if limit > 0:
        key, window_seconds, reset_in = _auth_failure_key(address)
        consume(key, limit, window_seconds, reset_in=reset_in)


def account_key(username: str) -> str:
    """The account a sign-in names, as its lockout counts it: the username as typed, NFKC-normalised,
    stripped and case-folded (so `Admin ` and `admin` share one count), hashed to keep the key short."""
    normal = unicodedata.normalize("NFKC", username or "").strip().casefold()
    return hashlib.sha256(normal.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _account_failure_key(account: str) -> tuple[str, int, float]:
    return _window_key("signinfail", account_key(account), settings.SIGN_IN_ACCOUNT_WINDOW_SECONDS)


def account_sign_in_locked(account: str) -> Decision | None:
    """The lockout of the account named `account` when SIGN_IN_FAILURES_PER_ACCOUNT failed sign-ins
    (from any addresses) used up this window, else None. The name need not exist: an unknown name
    locks the same way, so the lockout tells nobody which accounts exist."""
    return _locked_out(int(settings.SIGN_IN_FAILURES_PER_ACCOUNT), _account_failure_key(account))


def record_account_sign_in_failure(account: str, address: str) -> tuple[Decision, list[str]] | None:
    """Count one failed sign-in for `account` from `address` (fail open). Returns the window's count and
    the addresses that failed for it in the window (at most 20), or None with the lockout disabled."""
    limit = int(settings.SIGN_IN_FAILURES_PER_ACCOUNT)
    if limit <= 0:
        return None
    key, window_seconds, reset_in = _account_failure_key(account)
    decision = consume(key, limit, window_seconds, reset_in=reset_in)
    return decision, _remember_address(f"{key}:addresses", address, reset_in)


def failed_addresses(account: str) -> list[str]:
    """The addresses that failed to sign in as `account` in the current window (for the audit log)."""
    key, _, reset_in = _account_failure_key(account)
    return _remember_address(f"{key}:addresses", None, reset_in)


def _remember_address(key: str, address: str | None, ttl: float) -> list[str]:
    """Add `address` (if given) to the set at `key` (Redis, else the Django cache); the set's members. Fail open: []."""
    ttl_ms = max(1, int(ttl * 1000))
    url = settings.RATE_LIMIT_REDIS_URL
    try:
        if url and time.monotonic() >= _redis_down_until.get(url, 0.0):
            client, _ = _redis(url)
            with client.pipeline(transaction=False) as pipe:
                if address is not None and client.scard(key) < MAX_REMEMBERED_ADDRESSES:
                    pipe.sadd(key, address).pexpire(key, ttl_ms)
                found = pipe.smembers(key).execute()[-1]
            return sorted(a.decode() if isinstance(a, bytes) else a for a in found)
        found = set(cache.get(key) or ())
        if address is not None and address not in found and len(found) < MAX_REMEMBERED_ADDRESSES:
            found.add(address)
            cache.set(key, sorted(found), math.ceil(ttl_ms / 1000))
        return sorted(found)
    except Exception:  # an audit detail, never a reason to fail a sign-in
        return []


def client_address(request: HttpRequest) -> str:
    """The caller's IP as DRF's throttles see it: REMOTE_ADDR, or the X-Forwarded-For entry
    NUM_PROXIES trusted proxies back (the header is never trusted beyond them)."""
    # get_ident reads only request.META, which a Django HttpRequest has too (the admin's sign-in form); the stubs want a DRF Request.
    return throttling.BaseThrottle().get_ident(request) or "unknown"  # type: ignore[arg-type]


def caller_id(request: Request) -> str:
    """The identity a per-caller limit counts: the key's public id or the signed-in user."""
    user = request.user
    scope = getattr(user, "scope", None)  # an API key's principal (api.auth.Principal) carries its scope
    if isinstance(scope, Scope):
        return scope.principal
    return f"user:{getattr(user, 'pk', 'anon')}"


def consume_request(caller: str) -> Decision:
    """Count one request of `caller` (caller_id: a key's principal, or `user:<id>`) against
    RATE_LIMIT_PER_MINUTE in the current minute; not allowed (429 + Retry-After) past it. The one per-caller
    limit of every edge: the REST API and /mcp (PerKeyRateThrottle) and `manage.py mcp --http`
    (api.mcp_server.http_app) share the window, so a key gets one budget whichever it calls."""
    limit = settings.RATE_LIMIT_PER_MINUTE
    if limit <= 0:
        return Decision(True, 0, 0)
    now = time.time()
    window = int(now // 60)
    return consume(f"rl:{caller}:{window}", limit, 60, reset_in=(window + 1) * 60 - now)


class PerKeyRateThrottle(throttling.BaseThrottle):
    """RATE_LIMIT_PER_MINUTE requests per caller per minute (consume_request); 429 + Retry-After beyond."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return True
        decision = consume_request(caller_id(request))
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


def spend_daily_run(tenant_id: int) -> Decision:
    """Count one agent run against tenant `tenant_id`'s budget for today (UTC): `Tenant.settings["daily_runs"]`,
    else DEFAULT_DAILY_RUNS (0: unlimited). Not allowed once it is used up (retry_after: seconds to UTC
    midnight); RateLimitUnavailable (503) when nothing can count it. Every edge that starts a run calls
    this before it: the REST ask and conversation turns (api.views) and the MCP `ask` tool (api.mcp_server)."""
    tenant_settings = Tenant.objects.filter(pk=tenant_id).values_list("settings", flat=True).first() or {}
    return consume_daily_run(tenant_id, daily_run_limit(tenant_settings))


def consume_daily_run(tenant_id: int, limit: int) -> Decision:
    """Count one agent run against the tenant's budget for today (UTC)."""
    if limit <= 0:
        return Decision(True, 0, 0)
    now = datetime.now(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    return consume(f"runs:{tenant_id}:{now:%Y%m%d}", limit, 86400, reset_in=(midnight - now).total_seconds(), fail_open=False)
