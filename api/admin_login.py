"""The sign-in lockout of the admin and the chat page (one form mixin, tenants.limits' counters).

Two locks, both checked before the password is:
- per client address: an address that failed AUTH_FAILURES_PER_IP times in the window is refused,
  right password or not, until the window ends (the API's failed-key lockout, the same counter);
- per account: a username (as typed, normalised: tenants.limits.account_key) that failed
  SIGN_IN_FAILURES_PER_ACCOUNT times within SIGN_IN_ACCOUNT_WINDOW_SECONDS, from any addresses, is
  refused the same way, so spreading guesses over many addresses does not help.
An unknown username counts and locks exactly like a real one (same message, and no password check
while locked, for either), so the lockout tells nobody which accounts exist. Locking an account and
each attempt refused by its lock is an audit entry: a WARNING on the `grounded.security` logger naming
the account and the addresses its failures came from. Installed on the admin site by ApiConfig.ready
(the lockout belongs to the HTTP edge); the chat's sign-in form mixes it in too (api/chat.py).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from api import ratelimit
from tenants import limits
from tenants.conf import product_settings

security_log = logging.getLogger("grounded.security")


def account_locked_message(retry_after: int) -> str:
    minutes = max(1, math.ceil(retry_after / 60))
    return f"Too many failed sign-ins for this account: try again in {minutes} minute{'s' if minutes != 1 else ''}."


class SignInLockout(AuthenticationForm):
    """A sign-in form's clean() with the lockouts per client address and per account: refused while
    either is locked, and every failure counted against both. Mixed into the admin's and the chat's forms."""

    def clean(self) -> dict[str, Any]:
        address = ratelimit.client_address(self.request) if self.request is not None else "unknown"
        account = self.cleaned_data.get("username") or ""
        locked = limits.auth_failures_exceeded(address)
        if locked is not None:
            raise forms.ValidationError(f"Too many failed sign-ins from this address: try again in {locked.retry_after} s.",
                                        code="locked")
        account_locked = limits.account_sign_in_locked(account) if account else None
        if account_locked is not None:
            self._audit("sign_in_refused_account_locked", account, address, limits.failed_addresses(account))
            raise forms.ValidationError(account_locked_message(account_locked.retry_after), code="account_locked")
        try:
            return super().clean()
        except forms.ValidationError:
            limits.record_auth_failure(address)
            counted = limits.record_account_sign_in_failure(account, address) if account else None
            if counted is not None and counted[0].allowed and counted[0].count >= int(product_settings.SIGN_IN_FAILURES_PER_ACCOUNT):
                self._audit("sign_in_account_locked", account, address, counted[1])
            raise

    @staticmethod
    def _audit(event: str, account: str, address: str, addresses: list[str]) -> None:
        security_log.warning("%s: account %r, this attempt from %s, failed sign-ins in the window from %s", event, account, address,
                             ", ".join(addresses) or address,
                             extra={"event": event, "account": account, "address": address, "addresses": addresses or [address]})


class LockoutAuthenticationForm(SignInLockout, AdminAuthenticationForm):
    pass
