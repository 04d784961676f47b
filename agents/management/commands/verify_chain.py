"""`manage.py verify_chain [--tenant SLUG] [--digests DIR [--public-key FILE]]`: recompute every tenant's
run hash chain and name the first broken link; with --digests, also check the database against the
signed chain digests in DIR (agents/digests.py): removed newest runs and consistently rewritten
chains, which the chain alone cannot show, are reported with the first bad sequence number. The
public key is the configured signing key's unless --public-key names a PEM file.

Exit status 1 when any chain is broken or any digest fails. Reads as the owner (across tenants, past RLS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.chain import verify_tenant_chain
from agents.digests import load_public_key, signing_key, verify_digests
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Verify the per-tenant hash chains of agent runs; name the first broken run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="Tenant slug (default: every tenant).")
        parser.add_argument("--digests", help="Folder of signed chain digests to check the database against.")
        parser.add_argument("--public-key", help="PEM file of the digests' public key (default: the configured signing key's).")

    def handle(self, *args: Any, tenant: str | None = None, digests: str | None = None, public_key: str | None = None,
               **options: Any) -> None:
        tenants = Tenant.objects.using("owner").order_by("id")
        if tenant:
            tenants = tenants.filter(slug=tenant)
            if not tenants.exists():
                raise CommandError(f"no tenant with slug {tenant!r}")
        broken = 0
        for t in tenants:
            report = verify_tenant_chain(t.id, using="owner")
            if report.ok:
                self.stdout.write(f"OK      {t.slug}: {report.runs_checked} run(s) verified")
            else:
                broken += 1
                self.stdout.write(f"BROKEN  {t.slug}: {report.first_break}")
            if digests:
                broken += self._check_digests(t, digests, public_key)
        if broken:
            raise CommandError(f"{broken} broken chain(s)", returncode=1)

    def _check_digests(self, tenant: Tenant, folder: str, public_key: str | None) -> int:
        try:
            public = load_public_key(Path(public_key).read_text()) if public_key else signing_key().public_key()
        except (OSError, ValueError) as exc:
            raise CommandError(f"--public-key: {exc}") from None
        report = verify_digests(tenant.id, folder, public)
        if report.ok:
            self.stdout.write(f"OK      {tenant.slug}: {report.digests_checked} digest(s) match the database")
            return 0
        for problem in report.problems:
            self.stdout.write(f"BROKEN  {tenant.slug}: digest {problem}")
        return 1
