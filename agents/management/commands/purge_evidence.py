"""`manage.py purge_evidence --tenant SLUG [--document ID]`: remove retained evidence no run within the
tenant's retention period references; what such a run references is kept and reported (exit status 1
when a --document purge had to keep any)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.citations import purge
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Remove retained evidence (text runs retrieved) that no run within the tenant's retention period references."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        parser.add_argument("--document", type=int, help="Only this document's evidence.")

    def handle(self, *args: Any, tenant: str, document: int | None = None, **options: Any) -> None:
        found = Tenant.objects.using("owner").filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant with slug {tenant!r}")
        result = purge(found, document_id=document)
        self.stdout.write(f"removed {result.removed} evidence row(s); kept {result.kept} referenced by runs within the "
                          f"{result.retention_days}-day retention period")
        if document is not None and result.kept:
            raise CommandError(f"refused: {result.kept} row(s) of document {document} are evidence of runs within retention",
                               returncode=1)
