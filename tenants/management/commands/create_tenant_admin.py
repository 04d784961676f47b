"""`manage.py create_tenant_admin --tenant <slug>`: a staff user who administers one tenant, plus an API key.

Prints the password and the raw API key once (neither is stored in a readable form). Rerunning it
resets the password and issues a fresh key, revoking the previous key of the same name.
"""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from tenants.models import ApiKey, Membership, Role, Tenant


class Command(BaseCommand):
    help = "Create (or reset) a tenant administrator and an API key; prints the credentials once."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default=None, help="Default: a new random password.")
        parser.add_argument("--key-role", default=Role.READER, choices=[r.value for r in Role])

    def handle(self, *args, tenant: str, username: str, password: str | None, key_role: str, **options) -> None:
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"--tenant: no tenant with slug {tenant!r}")
        password = password or secrets.token_urlsafe(12)
        key_name = f"{username} (created by create_tenant_admin)"
        with transaction.atomic(using="default"):
            user, _ = get_user_model().objects.get_or_create(username=username)
            user.is_staff = True
            user.set_password(password)
            user.save()
            membership, _ = Membership.objects.get_or_create(user=user, tenant=found)
            membership.role = Role.ADMIN
            membership.all_departments = True
            membership.save()
            for old in ApiKey.objects.filter(tenant=found, name=key_name, revoked_at__isnull=True):
                old.revoke()
            _, raw = ApiKey.issue(tenant=found, name=key_name, role=key_role, all_departments=True)
        self.stdout.write(f"tenant admin for {found.slug!r}: username {username!r}  password {password!r}")
        self.stdout.write(f"API key ({key_role}, all departments; shown once): {raw}")
