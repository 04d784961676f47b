"""`manage.py grant_source --tenant <slug>`: what one tenant's sources may read (kb.sources.grants).

    manage.py grant_source --tenant acme --folder /srv/shares/acme        # a folder (under SOURCES_FOLDER_ROOTS)
    manage.py grant_source --tenant acme --website-host intranet.acme.example --allow-private
    manage.py grant_source --tenant acme --s3-endpoint minio.internal:9000 --allow-private
    manage.py grant_source --tenant acme --revoke --folder /srv/shares/acme
    manage.py grant_source --tenant acme                                  # lists the tenant's grants

A folder that equals, contains or is inside another tenant's folder grant is refused (exit status 1).
Runs through the owner connection (the application role only reads grants) and logs on `grounded.operator`.
"""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.sources.grants import GrantRefused, grant_source, revoke_source_grant
from kb.sources.models import SourceGrant
from tenants.models import Tenant
from tenants.operator import OWNER


class Command(BaseCommand):
    help = "Grant (or revoke, or list) the folders, website hosts and S3 endpoints a tenant's sources may read."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        what = parser.add_mutually_exclusive_group()
        what.add_argument("--folder", help="An absolute folder under SOURCES_FOLDER_ROOTS.")
        what.add_argument("--website-host", help="A website host name (any port).")
        what.add_argument("--s3-endpoint", help="An S3 endpoint host[:port].")
        parser.add_argument("--allow-private", action="store_true",
                            help="Hosts only: this host may resolve to a private address (an intranet, a local MinIO).")
        parser.add_argument("--note", default="", help="Why (kept with the grant).")
        parser.add_argument("--revoke", action="store_true", help="Take the grant back instead.")

    def handle(self, *args: Any, tenant: str, folder: str | None, website_host: str | None, s3_endpoint: str | None,
               allow_private: bool, note: str, revoke: bool, **options: Any) -> None:
        found = Tenant.objects.using(OWNER).filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"--tenant: no tenant with slug {tenant!r}")
        given = [(k, v) for k, v in ((SourceGrant.Kind.FOLDER, folder), (SourceGrant.Kind.WEBSITE_HOST, website_host),
                                     (SourceGrant.Kind.S3_ENDPOINT, s3_endpoint)) if v]
        if not given:
            if revoke:
                raise CommandError("--revoke: name the grant (--folder, --website-host or --s3-endpoint)")
            self._list(found)
            return
        kind, value = given[0]
        operator = f"operator:{getpass.getuser()}"
        try:
            if revoke:
                gone = revoke_source_grant(tenant=found, kind=kind, value=value, granted_by=operator)
                if not gone:
                    raise CommandError(f"tenant {found.slug!r} has no {kind} grant {value!r}")
                self.stdout.write(f"revoked {kind} {value!r} from tenant {found.slug!r}")
                return
            grant = grant_source(tenant=found, kind=kind, value=value, allow_private=allow_private, note=note,
                                 granted_by=operator)
        except GrantRefused as exc:
            raise CommandError(f"refused: {exc}") from None
        self.stdout.write(f"granted {grant.kind} {grant.value!r} to tenant {found.slug!r}"
                          + (" (private addresses allowed)" if grant.allow_private else ""))
        if kind == SourceGrant.Kind.FOLDER and not os.path.isdir(grant.value):
            self.stderr.write(f"note: {grant.value} is not a folder (yet): syncs fail until it is")

    def _list(self, tenant: Tenant) -> None:
        rows = SourceGrant.objects.unscoped_dangerously(using=OWNER).filter(tenant=tenant).order_by("kind", "value")
        if not rows:
            self.stdout.write(f"tenant {tenant.slug!r} has no source grants (no folder source; any public host)")
        for g in rows:
            extra = " private-allowed" if g.allow_private else ""
            self.stdout.write(f"{g.kind}\t{g.value}{extra}\t{g.granted_by} {g.created_at:%Y-%m-%d}\t{g.note}")
