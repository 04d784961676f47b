"""The admin sign-in with the API's lockout (api.ratelimit): an address that failed
AUTH_FAILURES_PER_IP times in the window is refused, right password or not, until it ends.
Installed on the admin site by ApiConfig.ready (the lockout belongs to the HTTP edge)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from api import ratelimit


class SignInLockout(AuthenticationForm):
    """A sign-in form's clean() with the API's lockout per client address (api.ratelimit): refused while
    the address is locked out, and every failure counted. Mixed into the admin's and the chat's forms."""

    def clean(self) -> dict[str, Any]:
        address = ratelimit.client_address(self.request) if self.request is not None else "unknown"
        locked = ratelimit.auth_failures_exceeded(address)
        if locked is not None:
            raise forms.ValidationError(f"Too many failed sign-ins from this address: try again in {locked.retry_after} s.",
                                        code="locked")
        try:
            return super().clean()
        except forms.ValidationError:
            ratelimit.record_auth_failure(address)
            raise


class LockoutAuthenticationForm(SignInLockout, AdminAuthenticationForm):
    pass
