"""`manage.py verify_chain [--tenant SLUG]`: recompute every tenant's run hash chain, name the first broken link.

Exit status 1 when any chain is broken. Reads as the owner (across tenants, past RLS).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from agents.chain import verify_tenant_chain
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Verify the per-tenant hash chains of agent runs; name the first broken run."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tenant", help="Tenant slug (default: every tenant).")

    def handle(self, *args, tenant: str | None = None, **options) -> None:
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
        if broken:
            raise CommandError(f"{broken} broken chain(s)", returncode=1)
