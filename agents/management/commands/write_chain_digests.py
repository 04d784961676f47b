"""`manage.py write_chain_digests [--dir DIR] [--changed-only] [--loop [--interval S]] [--print-public-key]`:
sign every tenant's chain tip now (agents/digests.py).

Writes one digest file per tenant under DIR (default CHAIN_DIGEST_DIR) and the public key beside
them (public_key.pem); keep a copy of that key where the database's owner cannot change it.
`--changed-only` skips tenants whose newest digest already signs their tip (what `scripts/run` runs at
start and on shutdown). `--loop` keeps doing that every S seconds (default CHAIN_DIGEST_INTERVAL_S)
until SIGTERM or Ctrl-C: the digest schedule of a run without Celery beat (`scripts/run` with
CELERY_TASK_ALWAYS_EAGER).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.digests import digest_loop, public_key_pem, signing_key, write_all_digests
from tenants.conf import product_settings


class Command(BaseCommand):
    help = "Sign every tenant's run chain tip with the chain signing key and write the digests outside the database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dir", help="Folder for the digests (default: CHAIN_DIGEST_DIR).")
        parser.add_argument("--changed-only", action="store_true", help="Skip tenants whose newest digest already signs their tip.")
        parser.add_argument("--loop", action="store_true", help="Write changed digests now and every --interval seconds until stopped.")
        parser.add_argument("--interval", type=float, help="Seconds between rounds of --loop (default: CHAIN_DIGEST_INTERVAL_S).")
        parser.add_argument("--print-public-key", action="store_true", help="Print the public key (PEM) and write nothing.")

    def handle(self, *args: Any, dir: str | None = None, changed_only: bool = False, loop: bool = False,
               interval: float | None = None, print_public_key: bool = False, **options: Any) -> None:
        if print_public_key:
            self.stdout.write(public_key_pem(signing_key()))
            return
        if loop:
            stop = threading.Event()
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: stop.set())
            digest_loop(interval or float(product_settings.CHAIN_DIGEST_INTERVAL_S), stop, dir, on_round=self._report)
            return
        self._report(write_all_digests(dir, changed_only=changed_only))

    def _report(self, paths: list[Path]) -> None:
        for path in paths:
            self.stdout.write(f"wrote {path}")
