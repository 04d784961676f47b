"""`manage.py search "<query>" --tenant <slug>`: run kb.retrieval.search from a shell and print the hits.

An operator tool: it searches with a whole-tenant scope (narrowed by --department), as admin code does.
"""

from __future__ import annotations

import json as jsonlib
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.models import Corpus
from kb.retrieval import MODES, Mode, SearchFilters, search, search_mode
from tenants.models import Department, Tenant
from tenants.scope import Scope, activate


class Command(BaseCommand):
    help = "Search a tenant's chunks and print the hits (score, title, locator, text)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("query")
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--mode", choices=MODES, type=search_mode, default="hybrid")
        parser.add_argument("--k", type=int, default=10)
        parser.add_argument("--corpus", action="append", default=[], help="corpus id or name (repeatable)")
        parser.add_argument("--department", action="append", default=[], help="department id or name (repeatable)")
        parser.add_argument("--json", action="store_true", dest="as_json", help="print the whole result as JSON")

    def handle(self, *args: Any, query: str, tenant: str, mode: Mode, k: int, corpus: list[str], department: list[str],
               as_json: bool, **options: Any) -> None:
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant with slug {tenant!r}")
        scope = Scope.system(found.id, principal="manage.py search")
        dept_ids = tuple(self._department_id(scope, found, d) for d in department) or None
        corpus_ids = tuple(self._corpus_id(scope, c) for c in corpus) or None
        result = search(scope, query, k=k, mode=mode, filters=SearchFilters(corpus_ids=corpus_ids, department_ids=dept_ids))
        if as_json:
            self.stdout.write(_dumps(result))
            return
        self.stdout.write(f"path={result.path} timings_ms={result.timings_ms}")
        self.stdout.write(f"filter={result.applied_filter}")
        for rank, h in enumerate(result.hits, 1):
            text = " ".join(h.text.split())
            self.stdout.write(f"{rank:>2}. {h.score:.4f}  [{h.corpus_name}] {h.document_title} | {h.locator}  (chunk {h.chunk_id})")
            self.stdout.write(f"    {text[:200]}{'…' if len(text) > 200 else ''}")
        if not result.hits:
            self.stdout.write("no hits")

    @staticmethod
    def _department_id(scope: Scope, tenant: Tenant, value: str) -> int:
        with activate(scope):
            qs = Department.objects.filter(tenant=tenant)
            dept = qs.filter(id=int(value)).first() if value.isdigit() else qs.filter(name=value).first()
        if dept is None:
            raise CommandError(f"no department {value!r} in tenant {tenant.slug}")
        return dept.id

    @staticmethod
    def _corpus_id(scope: Scope, value: str) -> int:
        with activate(scope):
            qs = Corpus.objects.for_scope(scope)
            found = qs.filter(id=int(value)).first() if value.isdigit() else qs.filter(name=value).first()
        if found is None:
            raise CommandError(f"no corpus {value!r} in this tenant")
        return found.id


def _dumps(result) -> str:
    return jsonlib.dumps(asdict(result), default=str, indent=2)
