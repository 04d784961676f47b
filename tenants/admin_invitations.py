"""The admin site's "Invite people" page and "Resend invitation" action (on the members list).

The page only translates a form into tenants.invitations.invite and emails the link; every rule is the
domain's. Its choices are what the acting admin may grant (roles at most its own, departments it sees,
"all departments" only for an all-departments admin) and are named, never numbered; anything posted
outside them is a form error, and the domain checks again. A superuser (an operator) first picks the
tenant (`?tenant=<slug>`) and then acts as that tenant's system scope, named `admin:user:<id>`.
"""

from __future__ import annotations

import smtplib
from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse

from tenants import access, invitations
from tenants.admin_base import admin_scope
from tenants.models import Department, Membership, Role, Tenant, TenantUser
from tenants.operator import OWNER
from tenants.scope import NotAllowed, NotVisible, Scope, activate

CONSOLE_BACKEND = "django.core.mail.backends.console.EmailBackend"


class InviteForm(forms.Form):
    """An invitation as the acting admin may make it (the choices come from its scope)."""

    email = forms.EmailField(max_length=invitations.MAX_EMAIL, help_text="The invitation link goes to this address.")
    role = forms.ChoiceField(help_text="Reader: asks questions. Editor: also uploads. Auditor: reviews runs. Admin: manages "
                                       "people and keys.")
    all_departments = forms.BooleanField(required=False, label="All departments",
                                         help_text="Every department, including ones created later.")
    departments = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                            help_text="What this person may read (with all departments off).")

    def __init__(self, *args: Any, scope: Scope, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        grantable = access.ROLE_GRANTS.get(scope.role, frozenset())
        role = self.fields["role"]
        assert isinstance(role, forms.ChoiceField)  # noqa: S101  (declared above)
        role.choices = [(value, label) for value, label in Role.choices if value in grantable]
        role.initial = Role.READER
        departments = self.fields["departments"]
        assert isinstance(departments, forms.MultipleChoiceField)  # noqa: S101  (declared above)
        departments.choices = [(name, name) for name in
                               access.visible_departments(scope).order_by("name").values_list("name", flat=True)]
        if not scope.all_departments:
            del self.fields["all_departments"]


def invite_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """GET: the form; POST: invite and email, then back to the members list with what happened."""
    if not model_admin.has_add_permission(request):
        raise PermissionDenied("you may not invite people")
    scope = admin_scope(request)
    context = {**model_admin.admin_site.each_context(request), "title": "Invite people", "opts": Membership._meta}
    if scope is None:
        if not request.user.is_superuser:
            raise PermissionDenied("choose a tenant first")
        tenant = Tenant.objects.using(OWNER).filter(slug=request.GET.get("tenant") or "").first()
        if tenant is None:
            tenants = Tenant.objects.using(OWNER).order_by("name")
            return TemplateResponse(request, "admin/tenants/membership/invite.html", {**context, "tenants": tenants})
        scope = Scope.system(tenant.pk, principal=f"admin:user:{request.user.pk}")
    with activate(scope):
        form = InviteForm(request.POST if request.method == "POST" else None, scope=scope)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                invitation = invitations.invite(scope, email=data["email"], role=data["role"],
                                                department_names=data["departments"],
                                                all_departments=bool(data.get("all_departments")), actor_user_id=request.user.pk)
            except (NotAllowed, NotVisible) as exc:
                field = getattr(exc, "field", None)
                form.add_error(field if field in form.fields else None, str(exc))
            else:
                send_on_commit(request, invitation)
                return redirect("admin:tenants_membership_changelist")
        response = TemplateResponse(request, "admin/tenants/membership/invite.html", {**context, "form": form})
        response.render()  # inside the tenant: the form's choices are read while rendering
        return response


def send_on_commit(request: HttpRequest, invitation: invitations.Invitation) -> None:
    """`send` once the invitation is stored: no email for an invitation rolled back, and no SMTP
    conversation while the transaction (and its tenant activation) is open."""
    transaction.on_commit(lambda: send(request, invitation))


def send(request: HttpRequest, invitation: invitations.Invitation) -> bool:
    """Email `invitation` and say so in a message (an error message when the email backend fails)."""
    url = request.build_absolute_uri(reverse("accept_invite", args=[invitation.token]))
    actor = request.user
    who = (actor.get_full_name() if isinstance(actor, User) else "") or actor.get_username()
    email = invitation.user.email
    try:
        invitations.send_invitation(invitation, accept_url=url, invited_by=who)
    except (smtplib.SMTPException, OSError) as exc:
        messages.error(request, f"The invitation of {email} is saved but its email could not be sent ({type(exc).__name__}: "
                                f"{exc}); use \"Resend invitation\" once email works.")
        return False
    where = " (no SMTP server is configured: the email is printed on the server's console)" \
        if settings.EMAIL_BACKEND == CONSOLE_BACKEND else ""
    verb = "sent again" if invitation.resent else "sent"
    messages.success(request, f"Invitation {verb} to {email}{where}. Their sign-in name is {invitation.user.get_username()}; "
                              f"the link works once.")
    return True


def department_names_of(member: Membership) -> list[str]:
    """The names of `member`'s departments (read with its tenant named, like every tenant query)."""
    return list(Department.objects.filter(tenant_id=member.tenant_id, membership=member).values_list("name", flat=True))


def resend_invitations(request: HttpRequest, queryset: QuerySet, scope_for: Callable[[int], Scope]) -> None:
    """Invite again the selected members who cannot sign in yet, with the role and departments they have
    (`scope_for(tenant_id)`: the scope the admin acts in for that member's tenant)."""
    for member in queryset.select_related("user"):
        user = member.user
        if invitations.can_sign_in(user):
            messages.info(request, f"{user.email or user.get_username()} can already sign in: nothing sent.")
            continue
        if not user.email:
            messages.error(request, f"{user.get_username()} has no email address: invite them by email instead.")
            continue
        scope = scope_for(member.tenant_id)
        with activate(scope):
            if not TenantUser.objects.filter(tenant_id=scope.tenant_id, user_id=user.pk).exists():
                messages.error(request, f"{user.email}: their account belongs to another tenant; an operator manages it.")
                continue
            try:
                invitation = invitations.invite(scope, email=user.email, role=member.role, all_departments=member.all_departments,
                                                department_names=department_names_of(member),
                                                actor_user_id=request.user.pk)
            except (NotAllowed, NotVisible) as exc:
                messages.error(request, f"{user.email}: {exc}")
                continue
        send_on_commit(request, invitation)
