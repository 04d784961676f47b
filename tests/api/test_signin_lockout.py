"""The sign-in lockout per account (issue 47, finding 9): failed sign-ins for one account from several
addresses lock it, the right password is refused too (with a message saying for how long), the lock
ends with its window, an audit entry names the account and the addresses, and an unknown username is
answered exactly like a real one. For the admin's sign-in and the chat's, counted in Redis and in the
Django cache."""

from __future__ import annotations

import logging
import time as real_time
import uuid
from types import SimpleNamespace

import pytest
from django.test import Client

from tenants import counters
from tests.factories import make_membership, make_staff_user, make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

WINDOW = 900
PASSWORD = "the-right-password-47"
SIGN_IN_URLS = {"admin": "/admin/login/", "chat": "/login/"}
LOCKED = "Too many failed sign-ins for this account: try again in 15 minutes."


@pytest.fixture
def clock(monkeypatch):
    """The clock the lockout windows read, one second into a window and movable (`clock[0] += s`)."""
    now = [WINDOW * 600 * 3_000_000 + 1.0]  # a multiple of both the account (900 s) and the address (600 s) windows
    monkeypatch.setattr(counters, "time", SimpleNamespace(time=lambda: now[0], monotonic=real_time.monotonic))
    return now


def _attempt(edge: str, username: str, password: str, address: str):
    client = Client()
    response = client.post(SIGN_IN_URLS[edge], {"username": username, "password": password}, REMOTE_ADDR=address)
    return response, "_auth_user_id" in client.session


def _errors(response) -> str:
    form = response.context["form"]
    return " ".join(form.non_field_errors())


@pytest.mark.parametrize("edge", ["admin", "chat"])
def test_failures_from_two_addresses_lock_the_account_until_the_window_ends(edge, backend, clock, settings, log_records):
    settings.SIGN_IN_FAILURES_PER_ACCOUNT = 4
    settings.SIGN_IN_ACCOUNT_WINDOW_SECONDS = WINDOW
    settings.AUTH_FAILURES_PER_IP = 20  # no address reaches its own lockout here
    tenant = make_tenant("Acme")
    name = f"victim-{uuid.uuid4().hex[:8]}"
    make_membership(make_staff_user(name, PASSWORD), tenant, "admin", all_departments=True)

    for address in ("10.47.0.1", "10.47.0.1", "10.47.0.2", "10.47.0.2"):
        response, signed_in = _attempt(edge, name, "wrong guess", address)
        assert response.status_code == 200 and not signed_in
        assert LOCKED not in _errors(response)
    # The right password, from a third address and with the name typed differently: refused, the lock said.
    for typed in (name, f"  {name.upper()} "):
        response, signed_in = _attempt(edge, typed, PASSWORD, "10.47.0.3")
        assert response.status_code == 200 and not signed_in
        assert _errors(response) == LOCKED
    # The audit entries: the lock, naming the account and both addresses, then each refused attempt.
    events = [(r.event, r.account, r.addresses) for r in log_records
              if r.name == "grounded.security" and r.levelno == logging.WARNING]
    assert events[0] == ("sign_in_account_locked", name, ["10.47.0.1", "10.47.0.2"]), events
    assert events[1][0] == "sign_in_refused_account_locked" and len(events) == 3

    # An unknown name locks and answers the same way: the lockout does not tell which accounts exist.
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"
    first = [_errors(_attempt(edge, n, "wrong guess", "10.47.0.4")[0]) for n in (ghost, f"victim-{uuid.uuid4().hex[:8]}")]
    assert first[0] == first[1]
    for address in ("10.47.0.4", "10.47.0.5", "10.47.0.5"):
        _attempt(edge, ghost, "wrong guess", address)
    assert _errors(_attempt(edge, ghost, PASSWORD, "10.47.0.6")[0]) == LOCKED

    clock[0] += WINDOW  # the window ends: the right password signs in
    response, signed_in = _attempt(edge, name, PASSWORD, "10.47.0.3")
    assert response.status_code == 302 and signed_in


def test_no_account_lockout_when_disabled(backend, clock, settings):
    settings.SIGN_IN_FAILURES_PER_ACCOUNT = 0
    tenant = make_tenant("Acme")
    name = f"victim-{uuid.uuid4().hex[:8]}"
    make_membership(make_staff_user(name, PASSWORD), tenant, "admin", all_departments=True)
    for i in range(12):
        _attempt("admin", name, "wrong guess", f"10.48.0.{i + 1}")
    response, signed_in = _attempt("admin", name, PASSWORD, "10.48.1.1")
    assert response.status_code == 302 and signed_in
