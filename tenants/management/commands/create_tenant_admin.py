"""`manage.py create_tenant_admin --tenant <slug>`: a staff user who administers one tenant, plus an API key.

Prints the password and the raw API key once (neither is stored in a readable form). Rerunning it
resets the password and issues a fresh key, revoking the previous key of the same name. Runs through
the owner connection (tenants.operator), since the application role may not create staff users.
"""

from __future__ import annotations

import secrets

from django.core.management.base import BaseCommand, CommandError

from tenants.models import Role, Tenant
from tenants.operator import make_tenant_admin


class Command(BaseCommand):
    help = "Create (or reset) a tenant administrator and an API key; prints the credentials once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default=None, help="Default: a new random password.")
        parser.add_argument("--key-role", default=Role.READER, choices=[r.value for r in Role])

    def handle(self, *args, tenant: str, username: str, password: str | None, key_role: str, **options) -> None:
        found = Tenant.objects.using("owner").filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"--tenant: no tenant with slug {tenant!r}")
        password = password or secrets.token_urlsafe(12)
        made = make_tenant_admin(tenant=found, username=username, password=password, key_role=key_role)
        self.stdout.write(f"tenant admin for {found.slug!r}: username {username!r}  password {password!r}")
        self.stdout.write(f"API key ({key_role}, all departments; shown once): {made.raw_key}")
