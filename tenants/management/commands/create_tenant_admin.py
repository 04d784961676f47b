"""`manage.py create_tenant_admin --tenant <slug>`: a staff user who administers one tenant, plus API keys.

Prints the password and each raw API key once, labelled with its role (neither is stored in a
readable form). `--key-role` may be repeated: one key per role (default: one reader key). Rerunning it
resets the password and issues fresh keys, revoking the user's earlier ones. Runs through the owner
connection (tenants.operator), since the application role may not create staff users.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.models import Role, Tenant
from tenants.operator import make_tenant_admin

# What a key of each role may do through the API (docs/api.md, "Authentication and roles").
ROLE_ABILITIES = {
    Role.ADMIN: "everything: corpora, uploads, search, ask, keys, members, runs and the chain",
    Role.EDITOR: "upload, re-ingest and delete documents; search and ask",
    Role.READER: "search, ask, read corpora and documents; no uploads",
    Role.AUDITOR: "read runs, feedback and the chain only",
}


class Command(BaseCommand):
    help = "Create (or reset) a tenant administrator and API keys; prints the credentials once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default=None, help="Default: a new random password.")
        parser.add_argument("--key-role", dest="key_roles", action="append", choices=[r.value for r in Role],
                            help="Role of an API key to issue; repeat for several keys (default: reader).")

    def handle(self, *args: Any, tenant: str, username: str, password: str | None, key_roles: list[str] | None,
               **options: Any) -> None:
        found = Tenant.objects.using("owner").filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"--tenant: no tenant with slug {tenant!r}")
        password = password or secrets.token_urlsafe(12)
        made = make_tenant_admin(tenant=found, username=username, password=password, key_roles=key_roles or [Role.READER])
        self.stdout.write(f"tenant admin for {found.slug!r}: username {username!r}  password {password!r}")
        for role, raw in made.raw_keys.items():
            self.stdout.write(f"API key, role {role} ({ROLE_ABILITIES[Role(role)]}; all departments; shown once): {raw}")
