"""The project's admin site: Django's, plus the tenant choice for staff of several tenants.

A staff user with admin-site memberships in several tenants sees, until they pick one, only the
choice (links to the tenant switch, `admin:tenants_tenant_switch`); never "the first membership".
"""

from __future__ import annotations

import functools

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.template.response import TemplateResponse
from django.urls import reverse

from tenants.scope import across_tenants


class GroundedAdminConfig(AdminConfig):
    """Django's admin app with the project's site (listed in INSTALLED_APPS instead of django.contrib.admin)."""

    default_site = "tenants.admin_site.GroundedAdminSite"


class GroundedAdminSite(admin.AdminSite):
    site_header = "grounded administration"
    site_title = "grounded admin"  # the browser tab's title, not "Django site admin"
    index_title = "Knowledge base administration"
    site_url = "/"  # "View site": the chat page
    enable_nav_sidebar = False  # the home page lists the same models; the sidebar cost change lists a third of the width
    login_template = "admin/grounded_login.html"  # Django's, plus the single sign-on button when configured

    def login(self, request, extra_context=None):
        # Here, not at the top: this module loads while the apps load, before django.contrib.auth's models exist.
        from tenants import oidc

        next_url = request.GET.get("next") or reverse("admin:index", current_app=self.name)
        return super().login(request, {"sso": oidc.button(next_url), **(extra_context or {})})

    def admin_view(self, view, cacheable=False):
        """Each admin page. A superuser's (the operator's: every tenant's rows, on the owner connection,
        tenants.admin_base.scoped_queryset) runs, rendering included, inside `across_tenants`."""

        def operator_pages(request, *args, **kwargs):
            if not getattr(request.user, "is_superuser", False):
                return view(request, *args, **kwargs)
            with across_tenants("operator: a superuser's admin pages show every tenant's rows"):
                response = view(request, *args, **kwargs)
                if callable(getattr(response, "render", None)) and not getattr(response, "is_rendered", True):
                    response.render()  # templates read querysets lazily: inside the block
                return response

        return super().admin_view(functools.wraps(view)(operator_pages), cacheable)

    def index(self, request, extra_context=None):
        # Here, not at the top: this module loads while the apps load (GroundedAdminConfig names it), before
        # the models that tenants.admin_base imports exist.
        from tenants.admin_base import admin_tenant_choices, needs_tenant_choice

        if needs_tenant_choice(request):
            context = {**self.each_context(request), "title": "Choose a tenant", "choices": admin_tenant_choices(request)}
            return TemplateResponse(request, "admin/tenants/choose_tenant.html", context)
        return super().index(request, extra_context)

    def password_change(self, request, extra_context=None):
        """Django's own password change, with a form that stores the new password where the database
        allows it (tenants.accounts.save_own_password): no tenant is active on this page."""
        # Here, not at the top: this module loads while the apps load, before tenants.admin_base's models exist.
        from django.contrib.auth.views import PasswordChangeView

        from tenants.admin_base import OwnPasswordChangeForm

        request.current_app = self.name
        return PasswordChangeView.as_view(
            form_class=OwnPasswordChangeForm, success_url=reverse("admin:password_change_done", current_app=self.name),
            extra_context={**self.each_context(request), **(extra_context or {})},
            **({"template_name": self.password_change_template} if self.password_change_template else {}))(request)
