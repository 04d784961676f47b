"""`manage.py import_corpus --tenant <slug> --file <file.jsonl.gz> [--name N] [--department D] [--reembed MODEL:DIM]`.

Loads a corpus file (kb.transfer; docs/export.md) into the tenant named here (never one the file
names) as a new corpus: everything is checked before anything is written, the write is one
transaction, and importing the same file again reports "already imported" and writes nothing. The
file's vectors are kept (nothing is embedded) when its model is this installation's; another model
is refused unless --reembed names one to embed the texts with.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.management.lookups import tenant_scope
from kb.transfer import FileRejected, import_corpus
from tenants.models import Department
from tenants.scope import NotAllowed, activate


class Command(BaseCommand):
    help = "Import a corpus file (.jsonl.gz from export_corpus) into a tenant as a new corpus, without re-embedding."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug: the corpus lands in this tenant only")
        parser.add_argument("--file", required=True, type=Path, help="the corpus file (.jsonl.gz)")
        parser.add_argument("--name", default=None, help="corpus name (default: the exported corpus's name)")
        parser.add_argument("--department", default=None, help="department name (default: tenant-wide)")
        parser.add_argument("--reembed", default=None, metavar="MODEL:DIM",
                            help="embed the texts with this model instead of keeping the file's vectors")

    def handle(self, *args: Any, tenant: str, file: Path, name: str | None, department: str | None, reembed: str | None,
               **options: Any) -> None:
        scope = tenant_scope(tenant, "import_corpus")
        department_id = None
        if department is not None:
            with activate(scope):
                department_id = Department.objects.filter(tenant_id=scope.tenant_id, name=department).values_list("pk", flat=True).first()
            if department_id is None:
                raise CommandError(f"tenant {tenant!r} has no department {department!r}")
        if not file.is_file():
            raise CommandError(f"no file {file}")
        started = time.perf_counter()
        try:
            with file.open("rb") as stream:
                result = import_corpus(scope=scope, stream=stream, name=name, department_id=department_id, reembed=reembed)
        except (FileRejected, NotAllowed) as exc:
            raise CommandError(f"refused, nothing written: {exc}") from None
        self.stdout.write(f"{result.describe()} ({time.perf_counter() - started:.2f} s)")
