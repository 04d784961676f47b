"""`manage.py distribution_check [--sql]`: the migrated schema checked against Citus's rules (tenants.distribution).

Prints one row per table (its role, distribution column, errors and warnings), then every finding, and
every place in the product's code that would set the tenant other than with SET LOCAL; exits 1 on any
error. With `--sql` it prints instead the statements that distribute the tables
(`create_reference_table`, `create_distributed_table(..., colocate_with => ...)`), for psql on a Citus
coordinator (docker-compose's `citus` profile), and still exits 1 when the schema breaks a rule, so
`set -o pipefail` stops a setup that would half-distribute it. Reads the catalog through the owner
connection.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connections

from tenants.distribution import (
    ERROR,
    LOCAL,
    ROLES,
    WARNING,
    check_schema,
    check_tenant_setting_source,
    distribution_sql,
    errors,
    product_sources,
    read_functions,
    read_schema,
)


class Command(BaseCommand):
    help = "Check the migrated schema against Citus's rules for distributed and reference tables; --sql: distribute it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sql", action="store_true",
                            help="Print the create_reference_table / create_distributed_table statements instead.")

    def handle(self, *args: Any, sql: bool = False, **options: Any) -> None:
        with connections["owner"].cursor() as cursor:
            tables, functions = read_schema(cursor), read_functions(cursor)
        findings = check_schema(tables) + check_tenant_setting_source(product_sources(Path(settings.BASE_DIR)))
        if sql:
            self.stdout.write(distribution_sql(tables, functions=functions), ending="")
        else:
            self._report(tables, findings)
        if errors(findings):
            for finding in errors(findings) if sql else ():
                self.stderr.write(str(finding))
            raise SystemExit(1)

    def _report(self, tables, findings) -> None:
        counts = Counter((f.table, f.severity) for f in findings)
        width = max(len(name) for name in tables) if tables else 10
        self.stdout.write(f"{'table':<{width}}  {'role':<11}  {'column':<9}  errors  warnings")
        for name in sorted(tables):
            role = ROLES.get(name)
            kind = role.kind if role else "UNDECLARED"
            column = (role.column or "") if role and role.kind != LOCAL else ""
            self.stdout.write(f"{name:<{width}}  {kind:<11}  {column:<9}  {counts[(name, ERROR)]:>6}  "
                              f"{counts[(name, WARNING)]:>8}")
        for finding in findings:
            self.stdout.write(str(finding))
        total = len(errors(findings))
        self.stdout.write(f"{len(tables)} tables, {total} errors, {len(findings) - total} warnings")
