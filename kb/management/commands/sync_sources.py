"""`manage.py sync_sources`: queue the syncs that are due now (all tenants), or `--source ID` now;
`--loop` keeps doing so every SOURCES_SCHEDULER_INTERVAL_SECONDS (the embedded run's scheduler,
started by scripts/run: with no broker a sync runs in this process).

`--loop` stops by itself when the process that started it is gone (its parent changes).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from kb.models import Source
from kb.sources.sync import request_sync, schedule_due_sources
from tenants.conf import product_settings
from tenants.scope import NotAllowed, Scope, across_tenants, activate

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Queue due source syncs (or one source's sync now); --loop to keep scheduling."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", type=int, help="sync this source now, whatever its schedule")
        parser.add_argument("--loop", action="store_true", help="keep scheduling until the parent process exits")

    def handle(self, *args: Any, source: int | None, loop: bool, **options: Any) -> None:
        if source is not None:
            with across_tenants("maintenance command: the tenant of the source named on the command line"):
                row = (Source.objects.unscoped_dangerously(using="owner").filter(pk=source)
                       .values_list("tenant_id", flat=True).first())
            if row is None:
                raise CommandError(f"no source {source}")
            scope = Scope.system(row, principal="manage.py sync_sources")
            with activate(scope):
                src = Source.objects.for_scope(scope).get(pk=source)
            try:
                sync, created = request_sync(scope=scope, source=src)
            except NotAllowed as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"sync {sync.pk} {'queued' if created else 'already queued or running'}")
            return
        parent = os.getppid()
        while True:
            try:
                started = schedule_due_sources()
                if started or not loop:
                    self.stdout.write(f"queued {len(started)} sync(s)" + (f": {', '.join(map(str, started))}" if started else ""))
            except Exception:
                if not loop:
                    raise
                logger.exception("source scheduler pass failed")
            finally:
                connections.close_all()
            if not loop:
                return
            deadline = time.monotonic() + product_settings.SOURCES_SCHEDULER_INTERVAL_SECONDS
            while time.monotonic() < deadline:
                if os.getppid() != parent:
                    return
                time.sleep(1)
