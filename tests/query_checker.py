"""The test-time tenant query checker: every statement that reads or writes a tenant table carries a
`tenant_id` term for each of its uses of such a table (issue 50: a distributed database routes a
statement to one shard only if it filters the distribution column, joins included).

`violations(sql, tenant_tables)` parses a statement (several, `;`-separated; `PREPARE ... AS <stmt>`
is checked as its statement) with sqlglot's PostgreSQL dialect and returns what it finds wrong:

- SELECT / UPDATE / DELETE: each tenant table (each alias) in a query block's FROM, JOIN, UPDATE, USING
  is constrained by a top-level AND term of its WHERE or of a JOIN's ON: `a.tenant_id = <value>`,
  `a.tenant_id IN (...)`, `a.tenant_id = ANY(...)`, where the value names no column of the block, or
  `a.tenant_id = b.tenant_id` with `b` constrained (an enclosing block's alias counts, for correlated
  subqueries). Terms under OR, NOT or CASE never count.
- INSERT into a tenant table names the `tenant_id` column (an INSERT ... SELECT is checked as its SELECT).
- Everything else (DDL, SET, TRUNCATE, catalogue reads, statements naming no tenant table) passes.

A statement that cannot be parsed but names a tenant table is a violation (fail closed). Results are
cached by statement text: Django repeats the same texts with new parameters.

`install(tenant_tables)` wraps every Django connection (each new DatabaseWrapper, through
`connection_created`) and psycopg's own `Cursor.execute` (the product's raw cursors on Django's
connection, kb.ingest.vectors.vector_cursor) so that a violating statement raises `TenantTermMissing`
before it runs. Exempt: inside `tenants.scope.across_tenants(reason)` (deliberate cross-tenant work),
while migrations run (MigrationExecutor.migrate: the command, the test database's set-up, migration
tests), and inside `allowed()` (tests that issue
tenant-less SQL on purpose, e.g. the adversarial RLS tests, via the `tenantless_sql` marker).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import re
from collections.abc import Iterable, Iterator

import sqlglot
from sqlglot import exp

logging.getLogger("sqlglot").setLevel(logging.ERROR)  # "falling back to parsing as a Command" on PREPARE


class TenantTermMissing(AssertionError):
    """A statement on a tenant table without a tenant_id term for it (the SQL is in the message)."""


# pgvector's distance operators are not PostgreSQL syntax sqlglot knows (`<#>` reads as a JSON path):
# any binary operator stands in for them, the tenant terms are elsewhere.
_VECTOR_OPS = re.compile(r"<[-#=+~%]>")
# psycopg's binary placeholders (%b, %(name)b) read as plain ones.
_BINARY_PLACEHOLDER = re.compile(r"%(\(\w+\))?b\b")
_PREPARE = re.compile(r"^\s*PREPARE\s+\w+(?:\s*\([^)]*\))?\s+AS\s+", re.IGNORECASE | re.DOTALL)
_BLOCKS = (exp.Select, exp.Update, exp.Delete, exp.Insert)
TENANT_COLUMN = "tenant_id"


def violations(sql: str, tenant_tables: frozenset[str]) -> list[str]:
    """What is wrong with `sql` (empty: nothing). See the module docstring for the rules."""
    lowered = sql.lower()
    if not any(table in lowered for table in tenant_tables):
        return []
    return list(_cached_violations(sql, tenant_tables))


@functools.lru_cache(maxsize=50_000)
def _cached_violations(sql: str, tenant_tables: frozenset[str]) -> tuple[str, ...]:
    text = _BINARY_PLACEHOLDER.sub("%s", _VECTOR_OPS.sub(" + ", sql))
    try:
        statements = sqlglot.parse(text, read="postgres")
    except sqlglot.errors.SqlglotError as exc:
        return (f"cannot parse a statement on a tenant table: {exc}",)
    found: list[str] = []
    for statement in statements:
        if statement is None:
            continue
        if isinstance(statement, exp.Command):
            rest = statement.expression.name if isinstance(statement.expression, exp.Literal) else ""
            if statement.name.upper() == "PREPARE":
                prepared = _PREPARE.sub("", f"PREPARE {rest}")
                if prepared.lstrip().upper().startswith("PREPARE"):
                    found.append("cannot read a PREPARE statement")
                else:
                    found += _cached_violations(prepared, tenant_tables)
            continue
        for block in _top_blocks(statement):
            found += _check_block(block, tenant_tables, frozenset())
    return tuple(found)


def _enclosing_block(node: exp.Expression) -> exp.Expression | None:
    parent = node.parent
    while parent is not None and not isinstance(parent, _BLOCKS):
        parent = parent.parent
    return parent


def _top_blocks(statement: exp.Expression) -> list[exp.Expression]:
    if isinstance(statement, _BLOCKS):
        return [statement]
    return [node for node in statement.find_all(*_BLOCKS) if _enclosing_block(node) is None]


def _child_blocks(block: exp.Expression) -> list[exp.Expression]:
    return [node for node in block.find_all(*_BLOCKS) if node is not block and _enclosing_block(node) is block]


def _table_name(table: exp.Table) -> str:
    return table.name.lower()


def _alias(table: exp.Table) -> str:
    return (table.alias or table.name).lower()


def _own_tables(block: exp.Expression) -> list[exp.Table]:
    """The tables a block reads or writes itself (not its subqueries' or CTEs')."""
    tables: list[exp.Table] = []
    for node in block.find_all(exp.Table):
        owner = _enclosing_block(node)
        if owner is block and not _in_cte(node, block):
            tables.append(node)
    return tables


def _in_cte(node: exp.Expression, block: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None and parent is not block:
        if isinstance(parent, exp.CTE):
            return True
        parent = parent.parent
    return False


def _conjuncts(condition: exp.Expression | None) -> Iterator[exp.Expression]:
    if condition is None:
        return
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if isinstance(condition, exp.And):
        yield from _conjuncts(condition.left)
        yield from _conjuncts(condition.right)
    else:
        yield condition


def _terms(block: exp.Expression) -> list[exp.Expression]:
    terms: list[exp.Expression] = []
    where = block.args.get("where")
    if where is not None:
        terms += _conjuncts(where.this)
    for join in block.args.get("joins") or []:
        terms += _conjuncts(join.args.get("on"))
    return terms


def _column_key(column: exp.Column, sole_alias: str | None) -> tuple[str, str] | None:
    """(alias, column) of a column reference; an unqualified one belongs to the block's sole tenant table."""
    alias = column.table.lower() if column.table else sole_alias
    return (alias, column.name.lower()) if alias else None


def _check_block(block: exp.Expression, tenant_tables: frozenset[str], outer: frozenset[str]) -> list[str]:
    """Violations of one query block and, recursively, of the blocks nested in it. `outer`: the aliases
    of enclosing blocks whose tenant_id is constrained (a correlated subquery may join on them)."""
    found: list[str] = []
    if isinstance(block, exp.Insert):
        target = block.this.this if isinstance(block.this, exp.Schema) else block.this
        if isinstance(target, exp.Table) and _table_name(target) in tenant_tables:
            columns = [c.name.lower() for c in block.this.expressions] if isinstance(block.this, exp.Schema) else []
            if TENANT_COLUMN not in columns:
                found.append(f"INSERT INTO {_table_name(target)} without a {TENANT_COLUMN} column")
        for child in _child_blocks(block):
            found += _check_block(child, tenant_tables, outer)
        return found
    tables = _own_tables(block)
    tenant_aliases = {_alias(t): _table_name(t) for t in tables if _table_name(t) in tenant_tables}
    local = {_alias(t) for t in tables}
    sole = next(iter(tenant_aliases)) if len(tenant_aliases) == 1 else None
    constrained: set[tuple[str, str]] = set()
    edges: list[tuple[tuple[str, str], tuple[str, str]]] = []
    for term in _terms(block):
        constrained_here, edge = _read_term(term, local, outer, sole)
        constrained |= constrained_here
        if edge:
            edges.append(edge)
    changed = True
    while changed:
        changed = False
        for a, b in edges:
            if (a in constrained) != (b in constrained):
                constrained |= {a, b}
                changed = True
    done = {alias for alias, column in constrained if column == TENANT_COLUMN}
    for alias, table in sorted(tenant_aliases.items()):
        if alias not in done:
            kind = type(block).__name__.upper()
            found.append(f"{kind} on {table}" + (f" AS {alias}" if alias != table else "")
                         + f" without a {alias}.{TENANT_COLUMN} term")
    inner_outer = outer | done
    for child in _child_blocks(block):
        found += _check_block(child, tenant_tables, frozenset(inner_outer))
    return found


def _names_local_column(node: exp.Expression, local: set[str], sole: str | None) -> bool:
    for column in node.find_all(exp.Column):
        key = _column_key(column, sole)
        if key is None or key[0] in local:
            return True
    return False


def _read_term(term: exp.Expression, local: set[str], outer: frozenset[str],
               sole: str | None) -> tuple[set[tuple[str, str]], tuple | None]:
    """(column keys the term pins to a value, an equality edge between two local columns)."""
    if isinstance(term, exp.EQ):
        left, right = term.this.unnest(), term.expression.unnest()
        for a, b in ((left, right), (right, left)):
            if isinstance(a, exp.Column):
                key = _column_key(a, sole)
                if key is None or key[0] not in local:
                    continue
                if isinstance(b, exp.Column):
                    other = _column_key(b, sole)
                    if other is not None and other[0] in local:
                        return set(), (key, other)
                    if other is not None and other[1] == TENANT_COLUMN and other[0] in outer:
                        return {key}, None
                    continue
                if isinstance(b, exp.Any) or not _names_local_column(b, local, sole):
                    return {key}, None
        return set(), None
    if isinstance(term, exp.In) and isinstance(term.this, exp.Column):
        key = _column_key(term.this, sole)
        if key is not None and key[0] in local:
            return {key}, None
    return set(), None


def tenant_tables_of(models: Iterable[type]) -> frozenset[str]:
    """The tables of the models that have a `tenant` field (link tables included once their through
    models gain one)."""
    tables = set()
    for model in models:
        if any(field.name == "tenant" for field in model._meta.concrete_fields):
            tables.add(model._meta.db_table.lower())
    return frozenset(tables)


# ---- installation -------------------------------------------------------------------------------

_ALLOWED: contextvars.ContextVar[str] = contextvars.ContextVar("tenantless_sql_allowed", default="")
_MIGRATING = {"depth": 0}


@contextlib.contextmanager
def allowed(reason: str) -> Iterator[None]:
    """Statements in the block are not checked (a test that issues tenant-less SQL on purpose)."""
    token = _ALLOWED.set(reason or "allowed")
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def _exempt() -> bool:
    # Imported here: the checker module is imported by conftest before Django's apps are ready.
    from tenants.scope import crossing_tenants

    return bool(_ALLOWED.get()) or _MIGRATING["depth"] > 0 or crossing_tenants() is not None


def check(sql: str, tenant_tables: frozenset[str]) -> None:
    """Raise TenantTermMissing if `sql` violates the rule and no exemption applies."""
    if not isinstance(sql, str):
        sql = sql.decode() if isinstance(sql, bytes) else str(sql)
    problems = violations(sql, tenant_tables)
    if problems and not _exempt():
        message = "; ".join(problems) + f"\n  in: {sql}"
        if RECORD["path"]:
            _record(message)
            return
        raise TenantTermMissing(message)


# `pytest --tenant-sql-log=PATH`: violations are appended to PATH with the product frames that issued
# them instead of raised (a survey of a directory in one run; never the suite's mode).
RECORD: dict[str, str | None] = {"path": None}


def _record(message: str) -> None:
    import traceback  # here: only the survey mode formats stacks

    frames = [f"    {f.filename.split('/main/')[-1]}:{f.lineno} {f.name}" for f in traceback.extract_stack()
              if "/main/" in f.filename and "/.venv/" not in f.filename and "query_checker" not in f.filename]
    with open(RECORD["path"] or "", "a", encoding="utf-8") as out:
        out.write(message + "\n" + "\n".join(frames[-8:]) + "\n\n")


def install(tenant_tables: frozenset[str]) -> None:
    """Check every statement of this process from now on (idempotent)."""
    import psycopg  # here: psycopg is a dependency of the product's database layer, loaded with Django
    from django.db import connections
    from django.db.backends.signals import connection_created
    from django.db.migrations.executor import MigrationExecutor

    def wrapper(execute, sql, params, many, context):
        check(sql, tenant_tables)
        return execute(sql, params, many, context)

    def attach(connection) -> None:
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)

    def on_created(sender, connection, **kwargs) -> None:
        attach(connection)

    connection_created.connect(on_created, weak=False, dispatch_uid="tenant_query_checker")
    for alias in connections:
        attach(connections[alias])

    cursor_execute = psycopg.Cursor.execute
    if getattr(cursor_execute, "tenant_checked", False):
        return

    executor_migrate = MigrationExecutor.migrate

    def migrating(self, *args, **kwargs):
        # Migrations (the `migrate` command, the test database's set-up, migration tests) are exempt.
        _MIGRATING["depth"] += 1
        try:
            return executor_migrate(self, *args, **kwargs)
        finally:
            _MIGRATING["depth"] -= 1

    MigrationExecutor.migrate = migrating  # type: ignore[method-assign]

    def checked_execute(self, query, params=None, **kwargs):
        # Django's cursors are psycopg Cursor subclasses already checked by the execute wrapper.
        if not type(self).__module__.startswith("django."):
            check(query if isinstance(query, str | bytes) else str(query), tenant_tables)
        return cursor_execute(self, query, params, **kwargs)

    cursor_executemany = psycopg.Cursor.executemany

    def checked_executemany(self, query, params_seq, **kwargs):
        if not type(self).__module__.startswith("django."):
            check(query if isinstance(query, str | bytes) else str(query), tenant_tables)
        return cursor_executemany(self, query, params_seq, **kwargs)

    checked_execute.tenant_checked = True  # type: ignore[attr-defined]
    psycopg.Cursor.execute = checked_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = checked_executemany  # type: ignore[method-assign]
