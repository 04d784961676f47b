"""Per-caller limits, counted in tenants.counters: requests per minute per caller (an API key's principal
or a signed-in user), failed API-key attempts and sign-ins per client address, failed sign-ins per
account (the username as typed). The edges call these (api.ratelimit's throttle, api.auth, the admin's
and the chat's sign-in, the MCP HTTP apps); none of them reads a request.

All fail open: a counter storage outage locks nobody out and refuses no request (tenants.counters).
"""

from __future__ import annotations

import hashlib
import unicodedata

from tenants import counters
from tenants.conf import product_settings
from tenants.counters import Decision


def consume_request(caller: str) -> Decision:
    """Count one request of `caller` (a key's principal, or `user:<id>`) against RATE_LIMIT_PER_MINUTE in
    the current minute; not allowed (the edges: 429 + Retry-After) past it. The one per-caller limit of
    every edge: the REST API and /mcp (api.ratelimit.PerKeyRateThrottle) and `manage.py mcp --http`
    (api.mcp_server.http_app) share the window, so a key gets one budget whichever it calls."""
    limit = product_settings.RATE_LIMIT_PER_MINUTE
    if limit <= 0:
        return Decision(True, 0, 0)
    key, window_seconds, reset_in = counters.window("rl", caller, 60)
    return counters.consume(key, limit, window_seconds, reset_in=reset_in)


def _locked_out(limit: int, counter: tuple[str, int, float]) -> Decision | None:
    """The lockout when the window's `counter` (counters.window) used up `limit` (0 or less: no lockout), else None."""
    if limit <= 0:
        return None
    key, window_seconds, _ = counter
    decision = counters.peek(key, limit, window_seconds)
    return None if decision.allowed else decision


def _auth_failure_key(address: str) -> tuple[str, int, float]:
    return counters.window("authfail", address, product_settings.AUTH_FAILURE_WINDOW_SECONDS)


def auth_failures_exceeded(address: str) -> Decision | None:
    """The lockout of `address` when it used up AUTH_FAILURES_PER_IP failed API-key attempts in
    this window, else None. Checked before a key is looked up, so a locked-out address cannot go
    on guessing and learn which guess was right."""
    return _locked_out(int(product_settings.AUTH_FAILURES_PER_IP), _auth_failure_key(address))


def record_auth_failure(address: str) -> None:
    """Count one failed API-key attempt from `address` (fail open: a storage outage locks nobody out)."""
    limit = int(product_settings.AUTH_FAILURES_PER_IP)
    if limit > 0:
        key, window_seconds, reset_in = _auth_failure_key(address)
        counters.consume(key, limit, window_seconds, reset_in=reset_in)


def account_key(username: str) -> str:
    """The account a sign-in names, as its lockout counts it: the username as typed, NFKC-normalised,
    stripped and case-folded (so `Admin ` and `admin` share one count), hashed to keep the key short."""
    normal = unicodedata.normalize("NFKC", username or "").strip().casefold()
    return hashlib.sha256(normal.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _account_failure_key(account: str) -> tuple[str, int, float]:
    return counters.window("signinfail", account_key(account), product_settings.SIGN_IN_ACCOUNT_WINDOW_SECONDS)


def account_sign_in_locked(account: str) -> Decision | None:
    """The lockout of the account named `account` when SIGN_IN_FAILURES_PER_ACCOUNT failed sign-ins
    (from any addresses) used up this window, else None. The name need not exist: an unknown name
    locks the same way, so the lockout tells nobody which accounts exist."""
    return _locked_out(int(product_settings.SIGN_IN_FAILURES_PER_ACCOUNT), _account_failure_key(account))


def record_account_sign_in_failure(account: str, address: str) -> tuple[Decision, list[str]] | None:
    """Count one failed sign-in for `account` from `address` (fail open). Returns the window's count and
    the addresses that failed for it in the window (at most counters.MAX_REMEMBERED), or None with the
    lockout disabled."""
    limit = int(product_settings.SIGN_IN_FAILURES_PER_ACCOUNT)
    if limit <= 0:
        return None
    key, window_seconds, reset_in = _account_failure_key(account)
    decision = counters.consume(key, limit, window_seconds, reset_in=reset_in)
    return decision, counters.remember(f"{key}:addresses", address, reset_in)


def failed_addresses(account: str) -> list[str]:
    """The addresses that failed to sign in as `account` in the current window (for the audit log)."""
    key, _, reset_in = _account_failure_key(account)
    return counters.remember(f"{key}:addresses", None, reset_in)


def _password_reset_allowed(kind: str, subject: str) -> bool:
    limit = int(product_settings.PASSWORD_RESET_REQUESTS_PER_HOUR)
    if limit <= 0:
        return True
    key, window_seconds, reset_in = counters.window(kind, subject, 3600)
    return counters.consume(key, limit, window_seconds, reset_in=reset_in).allowed


def consume_password_reset_request(address: str) -> bool:
    """Count one "Forgot password?" request from `address`; False past PASSWORD_RESET_REQUESTS_PER_HOUR
    in this hour (the page then says to wait; fail open like every limit here)."""
    return _password_reset_allowed("pwreset-ip", address)


def consume_password_reset_email(email: str) -> bool:
    """Count one reset email to `email` (normalised like account_key); False past PASSWORD_RESET_REQUESTS_PER_HOUR
    in this hour: the caller then sends nothing and says nothing different, so the limit tells nobody
    whether the address has an account."""
    return _password_reset_allowed("pwreset-email", account_key(email))
