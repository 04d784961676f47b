"""The pages a person uses to get in: accepting an invitation, and "Forgot password?".

- `/invite/<token>/`: the invitation email's link (tenants.invitations). Shows Django's SetPasswordForm
  (the password validators of settings); on success the account is active, the person is signed in and
  lands in the chat (`/`). An expired, used or unknown link gets a page that says which (410, 410, 400).
- `/password-reset/...`: Django's password-reset views and forms, with three differences: the new
  password is stored through the database wall (tenants.accounts.save_password_from_link: inside the
  user's home tenant, never for a superuser, never re-activating an account), requests are limited per
  client address and reset emails per address (tenants.limits; the per-email limit is silent, so the
  page never tells whether an account uses an address), and after the reset the person is signed in
  and lands in the chat.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import login
from django.contrib.auth.forms import PasswordResetForm, SetPasswordForm
from django.contrib.auth.views import (
    INTERNAL_RESET_SESSION_TOKEN,
    PasswordResetConfirmView,
    PasswordResetDoneView,
    PasswordResetView,
)
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from api import ratelimit
from tenants import invitations, limits
from tenants.accounts import save_password_from_link

BACKEND = "tenants.accounts.SignInBackend"
CHAT_URL = "/"


@sensitive_post_parameters("new_password1", "new_password2")
@never_cache
def accept_invite(request: HttpRequest, token: str) -> HttpResponse:
    """Set a password from an invitation link, then sign in and open the chat."""
    try:
        user = invitations.invited_user(token)
    except invitations.LinkInvalid as exc:
        return _link_problem(request, exc)
    form = SetPasswordForm(user, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            user = invitations.accept(token, form.cleaned_data["new_password1"])
        except invitations.LinkInvalid as exc:
            return _link_problem(request, exc)
        login(request, user, backend=BACKEND)
        return redirect(CHAT_URL)
    return render(request, "chat/accept_invite.html", {"form": form, "username": user.get_username()})


def _link_problem(request: HttpRequest, exc: invitations.LinkInvalid) -> HttpResponse:
    expired = isinstance(exc, invitations.LinkExpired)
    title = "Invitation expired" if expired else "Invitation link not valid"
    status = 410 if isinstance(exc, invitations.LinkExpired | invitations.LinkUsed) else 400
    return render(request, "chat/link_problem.html", {"title": title, "message": str(exc)}, status=status)


class ResetRequestForm(PasswordResetForm):
    """Django's reset request, sending nothing for a superuser (the operator's business: `manage.py
    changepassword`) or past the hourly limit of reset emails for one address; the page reads the same."""

    def get_users(self, email: str) -> Any:
        if not limits.consume_password_reset_email(email):
            return iter(())
        return (user for user in super().get_users(email) if not user.is_superuser)


class ResetRequestView(PasswordResetView):
    """"Forgot password?": an email with a link, if an account uses the address (never said which)."""

    form_class = ResetRequestForm
    template_name = "chat/password_reset.html"
    email_template_name = "onboarding/password_reset_email.txt"
    subject_template_name = "onboarding/password_reset_subject.txt"
    success_url = reverse_lazy("password_reset_done")

    def form_valid(self, form: Any) -> HttpResponse:
        if not limits.consume_password_reset_request(ratelimit.client_address(self.request)):
            form.add_error(None, "Too many password-reset requests from this address: try again in an hour.")
            response = self.form_invalid(form)
            response.status_code = 429
            return response
        return super().form_valid(form)


class ResetDoneView(PasswordResetDoneView):
    template_name = "chat/password_reset_done.html"


@method_decorator(sensitive_post_parameters("new_password1", "new_password2"), name="dispatch")
class ResetConfirmView(PasswordResetConfirmView):
    """Django's link check (single use: the token covers the password hash and the last sign-in; valid for
    PASSWORD_RESET_TIMEOUT), then the new password stored through the wall and the person signed in."""

    template_name = "chat/password_reset_confirm.html"
    success_url = CHAT_URL

    def form_valid(self, form: Any) -> HttpResponse:
        user = self.user
        if user is None:  # dispatch shows the form only for a user the link names
            return self.render_to_response(self.get_context_data(form=None))
        previous = user.password
        user.set_password(form.cleaned_data["new_password1"])
        if not user.is_active or not save_password_from_link(user, previous_password=previous, activate_account=False):
            self.validlink = False
            return self.render_to_response(self.get_context_data(form=None))
        del self.request.session[INTERNAL_RESET_SESSION_TOKEN]
        login(self.request, user, backend=BACKEND)
        return redirect(self.success_url)
