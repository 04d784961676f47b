"""`manage.py write_chain_digests [--dir DIR] [--print-public-key]`: sign every tenant's chain tip now.

Writes one digest file per tenant under DIR (default CHAIN_DIGEST_DIR) and the public key beside
them (public_key.pem); keep a copy of that key where the database's owner cannot change it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.digests import public_key_pem, signing_key, write_all_digests


class Command(BaseCommand):
    help = "Sign every tenant's run chain tip with the chain signing key and write the digests outside the database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dir", help="Folder for the digests (default: CHAIN_DIGEST_DIR).")
        parser.add_argument("--print-public-key", action="store_true", help="Print the public key (PEM) and write nothing.")

    def handle(self, *args: Any, dir: str | None = None, print_public_key: bool = False, **options: Any) -> None:
        if print_public_key:
            self.stdout.write(public_key_pem(signing_key()))
            return
        for path in write_all_digests(dir):
            self.stdout.write(f"wrote {path}")
