"""The chat page at `/` for a tenant's users: sign-in, conversations, streamed answers with step
progress, citations opening their source, feedback. Server-rendered; the page's small script talks
to the REST API (/api/v1/conversations/..., session authentication with the CSRF token), so every
rule is the API's. A member of several tenants picks one (`?tenant=<slug>`, sent as X-Tenant)."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView, LogoutView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.fields import CharField

from api.admin_login import SignInLockout
from api.serializers import MessageRequestSerializer
from tenants.principals import TenantChoiceRequired, choose_tenant, tenants_of_user

LOGIN_URL = "/login/"
# The longest message the conversation API accepts: the page shows it and refuses longer text itself.
MAX_MESSAGE_CHARS = cast(CharField, MessageRequestSerializer().fields["message"]).max_length


class ChatLoginForm(SignInLockout, AuthenticationForm):
    """Django's sign-in with the lockouts per client address and per account, like the admin's (api.admin_login)."""


login_view = LoginView.as_view(template_name="chat/login.html", authentication_form=ChatLoginForm, redirect_authenticated_user=True)
logout_view = LogoutView.as_view(next_page=LOGIN_URL)


@login_required(login_url=LOGIN_URL)
def chat_page(request: HttpRequest) -> HttpResponse:
    """The chat, in the tenant named by ?tenant= or the user's only one; the choice of tenants otherwise."""
    try:
        tenant = choose_tenant(request.user, request.GET.get("tenant") or None)
    except TenantChoiceRequired as exc:
        return render(request, "chat/choose.html", {"choices": exc.choices or tenants_of_user(request.user), "message": str(exc)},
                      status=200 if exc.choices else 403)
    return render(request, "chat/index.html", {"tenant": tenant, "max_message_chars": MAX_MESSAGE_CHARS})
