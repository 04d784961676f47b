"""Per-key rate limits (Redis DB 4, under xdist the worker's own DB, and the cache fallback) and their atomicity."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis
from rest_framework.test import APIClient

from agents import budgets
from tenants import counters
from tests.databases import redis_url_for_worker, xdist_worker

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

# Parallel workers have databases of their own, so their key and tenant ids repeat: their windows must not meet.
REDIS_URL = redis_url_for_worker("redis://127.0.0.1:6379/4", xdist_worker())


@pytest.fixture(params=["redis", "cache"])
def backend(request, settings):
    if request.param == "redis":
        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
        except redis.RedisError:
            pytest.skip("no Redis at 127.0.0.1:6379")
        settings.RATE_LIMIT_REDIS_URL = REDIS_URL
    settings.RATE_LIMIT_PER_MINUTE = 3
    return request.param


def test_over_limit_is_429_with_retry_after_per_key(world, backend):
    if time.time() % 60 > 55:  # the fixed window would roll over mid-test
        time.sleep(60 - time.time() % 60 + 0.1)
    c = world.client("a-reader")
    codes = [c.get("/api/v1/corpora/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    r = c.get("/api/v1/corpora/")
    assert r.status_code == 429 and 1 <= int(r["Retry-After"]) <= 60
    assert r.json()["error"]["code"] == "throttled"
    # Another key (even of the same tenant) has its own window.
    assert world.client("a-editor").get("/api/v1/corpora/").status_code == 200


def test_rejected_requests_do_not_consume(backend):
    key = f"rl:test:{uuid.uuid4()}"
    results = [counters.consume(key, 2, 60).allowed for _ in range(5)]
    assert results == [True, True, False, False, False]
    assert counters.consume(key, 3, 60).allowed  # one more unit with a bigger limit: count was not inflated


def test_concurrent_consumers_never_overshoot(backend):
    key = f"rl:test:{uuid.uuid4()}"
    allowed = []

    def hit():
        for _ in range(25):
            allowed.append(counters.consume(key, 40, 60).allowed)

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 40


def test_daily_budget_counts_per_tenant(backend):
    tenant_id = int(uuid.uuid4().int % 10**9) + 10**9
    assert [budgets.consume_daily_run(tenant_id, 2).allowed for _ in range(3)] == [True, True, False]
    assert budgets.consume_daily_run(tenant_id + 1, 2).allowed
    denied = budgets.consume_daily_run(tenant_id, 2)
    assert not denied.allowed and 1 <= denied.retry_after <= 86400
    assert budgets.consume_daily_run(tenant_id, 0).allowed  # 0 = unlimited


def test_daily_run_limit_reads_tenant_settings(settings):
    settings.DEFAULT_DAILY_RUNS = 7
    assert budgets.daily_run_limit({}) == 7
    assert budgets.daily_run_limit({"daily_runs": 3}) == 3
    assert budgets.daily_run_limit({"daily_runs": "bad"}) == 7


def test_storage_outage_fails_open_per_key_and_closed_for_the_daily_budget(world, settings, monkeypatch):
    """Redis down (nothing listens) and the fallback cache failing too: the per-minute limit allows,
    the daily agent-run budget refuses (CounterUnavailable; the API's 503 + Retry-After), never an unhandled error."""
    settings.RATE_LIMIT_REDIS_URL = "redis://127.0.0.1:1/0"

    def broken(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(counters, "_consume_cache", broken)
    assert counters.consume(f"rl:test:{uuid.uuid4().hex}", 1, 60).allowed
    with pytest.raises(counters.CounterUnavailable) as exc:
        budgets.consume_daily_run(10**9, 5)
    assert exc.value.retry_after > 0
    settings.DEFAULT_DAILY_RUNS = 5
    r = world.client("a-reader").post("/api/v1/ask/", {"question": "hotel limit?"}, format="json")
    assert r.status_code == 503 and r["Retry-After"] == "30"
    assert r.json() == {"error": {"code": "rate_limit_unavailable", "message": "rate-limit storage is unavailable, retry shortly",
                                  "fields": {}}}


def _address() -> str:
    """A client address of this test alone (Redis windows outlive a test run)."""
    n = uuid.uuid4().int
    return f"10.{n % 250}.{n // 250 % 250}.{n // 62500 % 250 + 1}"


def test_failed_api_keys_lock_out_the_address_even_for_a_valid_key(world, backend, settings, fixed_lockout_window):
    settings.AUTH_FAILURES_PER_IP = 3
    attacker, bystander = _address(), _address()
    guess = APIClient(REMOTE_ADDR=attacker)
    codes = []
    for i in range(4):
        guess.credentials(HTTP_AUTHORIZATION=f"Bearer gk_guess{i}")
        codes.append(guess.get("/api/v1/corpora/").status_code)
    assert codes == [401, 401, 401, 429]
    # The right key from the locked-out address is refused too: a lockout that let a correct
    # guess through would tell the attacker which guess was right.
    right = APIClient(REMOTE_ADDR=attacker)
    right.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys['a-reader']}")
    r = right.get("/api/v1/corpora/")
    assert r.status_code == 429 and 1 <= int(r["Retry-After"]) <= settings.AUTH_FAILURE_WINDOW_SECONDS
    assert r.json()["error"]["code"] == "throttled"
    # Another address with the same key is served.
    ok = APIClient(REMOTE_ADDR=bystander)
    ok.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys['a-reader']}")
    assert ok.get("/api/v1/corpora/").status_code == 200


def test_successes_do_not_count_and_forwarded_for_is_not_believed(world, backend, settings, fixed_lockout_window):
    settings.AUTH_FAILURES_PER_IP = 2
    settings.RATE_LIMIT_PER_MINUTE = 100
    address = _address()
    good = APIClient(REMOTE_ADDR=address)
    good.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys['a-reader']}")
    assert [good.get("/api/v1/corpora/").status_code for _ in range(5)] == [200] * 5
    # Without trusted proxies (NUM_PROXIES=0) a forged X-Forwarded-For does not give each guess a new address.
    codes = []
    for i in range(3):
        c = APIClient(REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR=_address())
        c.credentials(HTTP_AUTHORIZATION=f"Bearer gk_forged{i}")
        codes.append(c.get("/api/v1/corpora/").status_code)
    assert codes == [401, 401, 429]


def test_no_lockout_when_disabled(world, settings):
    settings.AUTH_FAILURES_PER_IP = 0
    c = APIClient(REMOTE_ADDR=_address())
    c.credentials(HTTP_AUTHORIZATION="Bearer gk_nope")
    assert {c.get("/api/v1/corpora/").status_code for _ in range(30)} == {401}
