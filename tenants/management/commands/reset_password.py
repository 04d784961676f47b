"""`manage.py reset_password --tenant <slug> --username <name>`: a fresh random password for one member.

Prints it once (it is stored hashed only), with the member's role and departments, so an operator can
hand a sign-in for the chat page (`/login/`, then `/`) to a tenant's employee; `scripts/run` prints one
for the demo's Engineering reader this way. Only the named user changes; a name that is not a member of
the tenant, and a superuser, are refused (tenants.operator.reset_member_password). Runs through the
owner connection, like create_tenant_admin.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.models import Tenant
from tenants.operator import NotAMember, reset_member_password


class Command(BaseCommand):
    help = "Give one member of a tenant a new random password; prints it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--username", required=True, help="The member's sign-in name.")

    def handle(self, *args: Any, tenant: str, username: str, **options: Any) -> None:
        found = Tenant.objects.using("owner").filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"--tenant: no tenant with slug {tenant!r}")
        password = secrets.token_urlsafe(12)
        try:
            membership = reset_member_password(tenant=found, username=username, password=password)
        except NotAMember as exc:
            raise CommandError(f"--username: {exc}") from None
        departments = "all departments" if membership.all_departments else (
            ", ".join(sorted(d.name for d in membership.departments.all())) or "no department")
        self.stdout.write(f"{membership.role} of {found.slug!r} ({departments}) for the chat at /: "
                          f"username {username!r}  password {password!r}")
