"""The chat page at `/` for a tenant's users: sign-in, conversations (renamed, deleted, searched),
answers streamed as they are written then shown as sanitised Markdown (agents.rendering), step
progress, citations opening their source, feedback, stop, regenerate and copy, a picker of the
corpora the user may ask and starter questions from their documents' titles (agents.selectors).
Server-rendered; the page's small script talks
to the REST API (/api/v1/conversations/..., session authentication with the CSRF token), so every
rule is the API's. A member of several tenants picks one (`?tenant=<slug>`, sent as X-Tenant)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView, LogoutView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.fields import CharField

from agents.selectors import corpus_overview, starter_questions
from api.admin_login import SignInLockout
from api.serializers import MessageRequestSerializer
from tenants import oidc
from tenants.conf import product_settings
from tenants.principals import TenantChoiceRequired, choose_tenant, tenants_of_user, user_scope
from tenants.scope import activate

LOGIN_URL = "/login/"
# The longest message the conversation API accepts: the page shows it and refuses longer text itself.
MAX_MESSAGE_CHARS = cast(CharField, MessageRequestSerializer().fields["message"]).max_length


class ChatLoginForm(SignInLockout, AuthenticationForm):
    """Django's sign-in with the lockouts per client address and per account, like the admin's (api.admin_login)."""


class ChatLoginView(LoginView):
    """Django's sign-in page, plus "Sign in with <provider>" when single sign-on is configured (tenants.oidc)."""

    template_name = "chat/login.html"
    authentication_form = ChatLoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso"] = oidc.button(self.get_success_url())
        return context


login_view = ChatLoginView.as_view()
logout_view = LogoutView.as_view(next_page=LOGIN_URL)


@login_required(login_url=LOGIN_URL)
def chat_page(request: HttpRequest) -> HttpResponse:
    """The chat, in the tenant named by ?tenant= or the user's only one; the choice of tenants otherwise."""
    try:
        tenant = choose_tenant(request.user, request.GET.get("tenant") or None)
    except TenantChoiceRequired as exc:
        return render(request, "chat/choose.html", {"choices": exc.choices or tenants_of_user(request.user), "message": str(exc)},
                      status=200 if exc.choices else 403)
    scope = user_scope(request.user, tenant.tenant_id)
    corpora: list[dict] = []
    starters: list[str] = []
    if scope is not None:
        with activate(scope):  # what this user may ask about: the corpus picker and the starter questions
            corpora, starters = corpus_overview(scope), starter_questions(scope)
    return render(request, "chat/index.html", {
        "tenant": tenant, "max_message_chars": MAX_MESSAGE_CHARS, "corpora": corpora, "starters": starters,
        "offline_mode": (product_settings.DEFAULT_ANSWER_PROVIDER or "offline").lower() == "offline"})
