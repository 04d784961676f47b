"""Each table's Citus role, and a check of the migrated schema against Citus's rules for those roles.

Citus cannot be installed here, so nothing distributes a table in the tests; instead `check_schema` reads
the migrated schema from the catalog (pg_class, pg_attribute, pg_constraint, pg_index, pg_policy,
pg_trigger) and applies the rules Citus enforces when `create_distributed_table` /
`create_reference_table` run, or when a constraint, policy or trigger is added to a Citus table. A
schema this check passes is one those calls accept; `distribution_sql` writes the calls
(`manage.py distribution_check --sql`, run by docker-compose's `citus` profile; docs/scaling.md).

Roles (`ROLES`, one entry per table of every schema the product owns: a table without one fails, so a
new table must be classified here):

- DISTRIBUTED: hash-distributed by `tenant_id`, all co-located (with `tenants_department`), so one
  tenant's rows of every table live on one node and joins and foreign keys between them stay on it
  (https://docs.citusdata.com/en/stable/use_cases/multi_tenant.html: distribute every tenant table by
  the tenant id, co-locate them).
- REFERENCE: replicated to every node: the tenants themselves (`tenants_tenant`: its slug and name are
  unique across tenants, which only a reference table can keep, and sign-in reads it before a tenant is
  known) and each user's home tenant, tables without a tenant that tenant tables point at (Django's
  users, groups, permissions, content types), and the database wall's key, which `grounded_tenant()`
  reads on whichever node evaluates a shard's policy.
- LOCAL: stays on the coordinator, unknown to Citus: Django's bookkeeping (migrations, sessions).

Rules, with where Citus states them (Citus 13, the version docker-compose pins; the source files named
were read at citusdata/citus a3d5708a6, May 2026, and say the same in 13.x):

1. A distributed table has its distribution column, NOT NULL ("cannot perform an INSERT with NULL in the
   partition column"), of the co-location anchor's type (co-located tables hash the same type;
   `create_distributed_table(..., colocate_with => ...)` refuses others).
2. Every PRIMARY KEY, UNIQUE and EXCLUDE constraint and every unique index of a distributed table
   includes the distribution column: Citus enforces uniqueness per shard only
   (https://docs.citusdata.com/en/stable/faq/faq.html "Can I create primary keys on distributed
   tables?"; https://docs.citusdata.com/en/stable/develop/reference_ddl.html, "Constraints").
3. Foreign keys (citusdata/citus src/backend/distributed/commands/foreign_constraint.c,
   `ErrorIfUnsupportedForeignConstraintExists`; reference_ddl.html "Foreign keys"):
   distributed -> distributed only with the distribution column on both sides at the same position
   ("either in between two colocated tables including partition column in the same ordinal in the both
   tables or from distributed to reference tables"); distributed -> reference allowed; reference ->
   distributed forbidden ("foreign keys from reference tables to distributed tables are not
   supported"); distributed -> local forbidden ("referenced table must be a distributed table or a
   reference table"); reference -> local only with NO ACTION / RESTRICT (the local table becomes a
   Citus local table); local -> distributed forbidden. A key that includes the referencing side's
   distribution column may not be ON DELETE SET NULL / SET DEFAULT nor ON UPDATE SET NULL / SET
   DEFAULT / CASCADE (`EnsureSupportedFKeyOnDistKey`). PostgreSQL 15's column list does not help:
   Citus looks at the action only, and its own regression test (src/test/regress/expected/pg15.out,
   "currently only reference tables can support that") shows `create_distributed_table` refusing
   `FOREIGN KEY (tid, fk) ... ON DELETE SET NULL (fk)`.
4. A policy on a distributed or reference table has no subquery in USING or WITH CHECK: Citus refuses
   any SubLink (src/backend/distributed/commands/policy.c, `ErrorIfUnsupportedPolicyExpr`:
   "Subqueries are not supported in policies on distributed tables"). That includes the scalar
   `(SELECT grounded_tenant())` written for an initplan, not only EXISTS / IN (SELECT ...).
5. Triggers: Citus refuses them on distributed and reference tables unless `citus.enable_unsafe_triggers`
   is on (src/backend/distributed/commands/trigger.c, `ErrorOutForTriggerIfNotSupported`;
   https://docs.citusdata.com/en/stable/extra/triggers.html); the `citus` profile turns it on. With it on
   a trigger runs where the shard is: safe for a trigger that looks only at the row and the settings
   (the append-only traces, the operator-only grant check), so those are listed as WARNINGS, to re-read
   when they change. A trigger whose function reads a table (FROM / JOIN in its body) FAILS on a
   distributed table: there it would see one node's rows and take one node's advisory locks. On a
   reference table every node holds the whole table, so it is a warning there: that is why
   `kb_sourcegrant` (its disjointness trigger reads the other tenants' folder grants) and
   `tenants_tenantuser` (read by the `auth_user` guard) are reference tables.

And one check of the code rather than the schema (`check_tenant_setting_source`): the tenant reaches
the database only as `SET LOCAL` statements (tenants/db_wall.py `tenant_statements`). Citus passes a
transaction's `SET LOCAL` on to the workers when `citus.propagate_set_commands` is `local` (default
`none`; the `citus` profile sets it), and never a `set_config()` call, so a policy on a worker would
see no tenant. Session-level `SET app....` would outlive the transaction on a pooled connection. The
one `set_config` allowed is kb/migrations/0005's backfill (`ALLOWED_SET_CONFIG`): migrations run on
the coordinator before any table is distributed (docs/scaling.md: migrate, then distribute), where
it is plain PostgreSQL.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

DISTRIBUTED, REFERENCE, LOCAL = "distributed", "reference", "local"
ERROR, WARNING = "error", "warning"
ANCHOR = "tenants_department"  # the co-location group's first table (the first tenant table migration 0001 made)
# Schemas the product does not own: PostgreSQL's, and the ones Citus creates on install.
FOREIGN_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast", "citus", "citus_internal", "columnar",
                   "columnar_internal")


@dataclass(frozen=True)
class Role:
    """A table's place in a Citus cluster; `column` is the distribution column of a distributed table."""

    kind: str
    column: str | None = None
    colocate_with: str | None = None


def distributed(column: str = "tenant_id", colocate_with: str | None = ANCHOR) -> Role:
    return Role(DISTRIBUTED, column, colocate_with)


TENANT_TABLES = (
    "tenants_department", "tenants_apikey", "tenants_apikey_departments", "tenants_membership",
    "tenants_membership_departments",
    "kb_corpus", "kb_document", "kb_documentcontent", "kb_chunk", "kb_chunksentence", "kb_embeddingcache",
    "kb_ingestjob", "kb_source", "kb_sourcesync", "kb_sourcechange", "kb_sourceitem",
    "agents_run", "agents_runstep", "agents_citation", "agents_evidence", "agents_conversation",
    "agents_feedback",
)
ROLES: dict[str, Role] = {
    ANCHOR: distributed(colocate_with=None),
    **{table: distributed() for table in TENANT_TABLES if table != ANCHOR},
    **{table: Role(REFERENCE) for table in (
        # The tenants themselves: a slug and a name unique across tenants (a distributed table could only keep
        # them unique per shard), read by sign-in before any tenant is known, and pointed at by every tenant
        # table's tenant_id (distributed -> reference keys are allowed).
        "tenants_tenant",
        # A user's home tenant: one row per user (its key is the user), beside auth_user, whose guard trigger reads it.
        "tenants_tenantuser",
        # Folder grants must not overlap across tenants: a rule over every tenant's rows, checked by a trigger
        # that reads them (rule 5). Few rows, written by operators only.
        "kb_sourcegrant",
        "auth_user", "auth_group", "auth_permission", "auth_group_permissions", "auth_user_groups",
        "auth_user_user_permissions", "django_content_type",
        "django_admin_log",  # points at auth_user and django_content_type; few rows, written by admin actions
        "grounded_private.wall_key",  # grounded_tenant() reads it wherever a shard's policy is evaluated
    )},
    "django_migrations": Role(LOCAL),
    "django_session": Role(LOCAL),
}


@dataclass(frozen=True)
class Finding:
    """One rule a table breaks (ERROR) or a thing to know before distributing it (WARNING)."""

    table: str
    rule: str
    message: str
    severity: str = ERROR

    def __str__(self) -> str:
        return f"{self.severity}: {self.table}: [{self.rule}] {self.message}"


@dataclass
class Table:
    name: str  # "table" in public, "schema.table" elsewhere
    columns: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (type, not null)
    keys: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (kind, name, columns): p/u/x/index
    foreign_keys: list[ForeignKey] = field(default_factory=list)
    policies: list[tuple[str, str, bool]] = field(default_factory=list)  # (name, deparsed, has a subquery)
    triggers: list[tuple[str, str, bool]] = field(default_factory=list)  # (name, function, it reads tables)


@dataclass(frozen=True)
class ForeignKey:
    name: str
    columns: tuple[str, ...]
    target: str
    target_columns: tuple[str, ...]
    on_delete: str  # pg_constraint.confdeltype: a no action, r restrict, c cascade, n set null, d set default
    on_update: str
    definition: str


def _qualified(schema: str, name: str) -> str:
    return name if schema == "public" else f"{schema}.{name}"


def read_schema(cursor, schemas: Iterable[str] | None = None) -> dict[str, Table]:
    """Every ordinary table of `schemas` (default: every schema the product owns), as the catalog has it."""
    wanted = None if schemas is None else list(schemas)
    cursor.execute("""
        SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
           AND CASE WHEN %s::text[] IS NULL THEN NOT (n.nspname = ANY(%s) OR n.nspname LIKE 'pg\\_%%')
                    ELSE n.nspname = ANY(%s) END
           AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')""",
                   [wanted, list(FOREIGN_SCHEMAS), wanted or []])
    oids = {oid: Table(_qualified(schema, name)) for oid, schema, name in cursor.fetchall()}
    if not oids:
        return {}
    ids = list(oids)
    cursor.execute("""SELECT attrelid, attnum, attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute
                       WHERE attrelid = ANY(%s) AND attnum > 0 AND NOT attisdropped""", [ids])
    names: dict[tuple[int, int], str] = {}
    for oid, num, name, type_, not_null in cursor.fetchall():
        oids[oid].columns[name] = (type_, not_null)
        names[(oid, num)] = name
    cursor.execute("""SELECT conrelid, contype, conname, conkey, confrelid, confkey, confdeltype, confupdtype,
                             pg_get_constraintdef(oid), confrelid::regclass::text
                        FROM pg_constraint WHERE conrelid = ANY(%s) AND contype IN ('p', 'u', 'x', 'f')""", [ids])
    for oid, kind, name, key, target, target_key, on_delete, on_update, definition, target_text in cursor.fetchall():
        columns = [names[(oid, n)] for n in key]
        if kind != "f":
            oids[oid].keys.append((kind, name, columns))
            continue
        target_name = oids[target].name if target in oids else target_text
        target_columns = tuple(names.get((target, n), str(n)) for n in target_key)
        oids[oid].foreign_keys.append(ForeignKey(name, tuple(columns), target_name, target_columns, on_delete,
                                                 on_update, definition))
    # Unique indexes that back no constraint (CREATE UNIQUE INDEX, Django's UniqueConstraint with a condition).
    cursor.execute("""SELECT i.indrelid, c.relname, i.indkey::int2[] FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                       WHERE i.indrelid = ANY(%s) AND i.indisunique
                         AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)""", [ids])
    for oid, name, key in cursor.fetchall():
        oids[oid].keys.append(("index", name, [names.get((oid, n), "(expression)") for n in key]))
    # A SubLink in the stored expression tree is exactly what Citus's checkExprHasSubLink finds.
    cursor.execute("""SELECT polrelid, polname,
                             concat_ws(' WITH CHECK ', pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)),
                             coalesce(polqual::text, '') || coalesce(polwithcheck::text, '') LIKE '%%{SUBLINK %%'
                        FROM pg_policy WHERE polrelid = ANY(%s)""", [ids])
    for oid, name, text, subquery in cursor.fetchall():
        oids[oid].policies.append((name, " ".join(text.split()), subquery))
    # Whether the trigger's function reads a table: a FROM or JOIN followed by a name in its body.
    cursor.execute("""SELECT t.tgrelid, t.tgname, t.tgfoid::regproc::text, p.prosrc ~* '\\m(from|join)\\s+[a-z_"]'
                        FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                       WHERE t.tgrelid = ANY(%s) AND NOT t.tgisinternal""", [ids])
    for oid, name, function, reads_tables in cursor.fetchall():
        oids[oid].triggers.append((name, function, reads_tables))
    return {table.name: table for table in oids.values()}


_ACTIONS = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


def _role_findings(tables: Mapping[str, Table], roles: Mapping[str, Role]) -> list[Finding]:
    found = [Finding(name, "declared", "no Citus role declared (add it to tenants/distribution.py ROLES)")
             for name in sorted(tables) if name not in roles]
    found += [Finding(name, "declared", "declared in ROLES but no such table") for name in sorted(roles)
              if name not in tables]
    return found


def _column_findings(table: Table, role: Role, tables: Mapping[str, Table], roles: Mapping[str, Role]) -> list[Finding]:
    column = role.column or ""
    if column not in table.columns:
        return [Finding(table.name, "distribution column", f"has no column {column!r} to distribute by")]
    found = []
    type_, not_null = table.columns[column]
    if not not_null:
        found.append(Finding(table.name, "distribution column", f"{column} is nullable (Citus refuses a NULL "
                             "distribution value)"))
    anchor = tables.get(role.colocate_with or "")
    anchor_role = roles.get(role.colocate_with or "")
    if anchor is not None and anchor_role is not None and anchor_role.column in anchor.columns:
        anchor_type = anchor.columns[anchor_role.column][0]
        if anchor_type != type_:
            found.append(Finding(table.name, "co-location", f"{column} is {type_}, {anchor.name}.{anchor_role.column} "
                                 f"is {anchor_type}: co-located tables need one type"))
    for kind, name, columns in table.keys:
        if column not in columns:
            what = {"p": "primary key", "u": "unique constraint", "x": "exclusion constraint"}.get(kind, "unique index")
            found.append(Finding(table.name, "unique keys", f"{what} {name} ({', '.join(columns)}) does not include "
                                 f"{column}: Citus enforces uniqueness per shard only"))
    return found


def _foreign_key_findings(table: Table, roles: Mapping[str, Role]) -> list[Finding]:
    found = []
    role = roles[table.name]
    for fk in table.foreign_keys:
        target = roles.get(fk.target)
        if target is None:
            continue  # reported as an undeclared table
        pair, where = (role.kind, target.kind), f"{fk.name} -> {fk.target}"
        if pair in {(REFERENCE, DISTRIBUTED), (LOCAL, DISTRIBUTED)}:
            found.append(Finding(table.name, "foreign keys", f"{where}: a {role.kind} table cannot reference a "
                                 "distributed table"))
        elif pair == (DISTRIBUTED, LOCAL):
            found.append(Finding(table.name, "foreign keys", f"{where}: a distributed table can reference only "
                                 "distributed or reference tables"))
        elif pair == (REFERENCE, LOCAL) and not {fk.on_delete, fk.on_update} <= {"a", "r"}:
            found.append(Finding(table.name, "foreign keys", f"{where}: a reference table's key to a local table "
                                 "must be NO ACTION or RESTRICT"))
        if role.kind != DISTRIBUTED or role.column not in fk.columns:
            continue
        position = fk.columns.index(role.column)
        if target.kind == DISTRIBUTED and fk.target_columns[position] != target.column:
            found.append(Finding(table.name, "foreign keys", f"{where} ({', '.join(fk.columns)}) -> "
                                 f"({', '.join(fk.target_columns)}): {role.column} must meet {fk.target}.{target.column} "
                                 "at the same position"))
        actions = ([f"ON DELETE {_ACTIONS[fk.on_delete]}"] if fk.on_delete in "nd" else []) + (
            [f"ON UPDATE {_ACTIONS[fk.on_update]}"] if fk.on_update in "ndc" else [])
        if actions:
            found.append(Finding(table.name, "foreign keys", f"{where}: {' and '.join(actions)} on a key holding the "
                                 f"distribution column (Citus would change or clear {role.column} through it)"))
    if role.kind == DISTRIBUTED:
        for fk in table.foreign_keys:
            target = roles.get(fk.target)
            if target is not None and target.kind == DISTRIBUTED and role.column not in fk.columns:
                found.append(Finding(table.name, "foreign keys", f"{fk.name} -> {fk.target} ({', '.join(fk.columns)})"
                                     f" joins on {', '.join(fk.target_columns)} alone: it must include "
                                     f"{role.column} -> {fk.target}.{target.column}"))
    return found


def check_schema(tables: Mapping[str, Table], roles: Mapping[str, Role] = ROLES) -> list[Finding]:
    """Every way `tables` (from `read_schema`) breaks the rules above for `roles`; WARNINGs are for
    triggers only. Empty errors: Citus would accept `distribution_sql`."""
    found = _role_findings(tables, roles)
    for name in sorted(tables):
        table, role = tables[name], roles.get(name)
        if role is None or role.kind == LOCAL:
            continue
        if role.kind == DISTRIBUTED:
            found += _column_findings(table, role, tables, roles)
        found += _foreign_key_findings(table, roles)
        found += [Finding(name, "policies", f"policy {policy} has a subquery: {text}")
                  for policy, text, subquery in table.policies if subquery]
        for trigger, function, reads_tables in table.triggers:
            if reads_tables and role.kind == DISTRIBUTED:
                found.append(Finding(name, "triggers", f"trigger {trigger} ({function}) reads tables: on the shard's "
                                     "node it sees that node's rows and takes that node's locks"))
            else:
                found.append(Finding(name, "triggers", f"trigger {trigger} ({function}) needs "
                                     "citus.enable_unsafe_triggers and runs on the shard's node", WARNING))
    return found


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]


def read_functions(cursor, schemas: Iterable[str] = ("public", "grounded_private")) -> list[str]:
    """The signatures of the product's own SQL functions (policies and triggers call them on the workers)."""
    cursor.execute("""SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                       WHERE n.nspname = ANY(%s) AND p.prokind = 'f'
                         AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
                       ORDER BY 1""", [list(schemas)])
    return [signature for (signature,) in cursor.fetchall()]


def distribution_sql(tables: Mapping[str, Table], roles: Mapping[str, Role] = ROLES, functions: Iterable[str] = ()) -> str:
    """The statements that make the migrated schema a Citus one, as one transaction (`psql -v
    ON_ERROR_STOP=1 -f`, or one multi-statement execute): every foreign key between Citus tables dropped,
    reference tables created, `functions` (from `read_functions`) created on every node with
    `create_distributed_function` (what Citus's manual advises for functions the workers need:
    https://docs.citusdata.com/en/stable/develop/reference_propagation.html), the anchor then every
    distributed table distributed co-located with it, and the keys added back (dropping them first frees
    the order from the key graph, which may have cycles: kb_source.last_sync). Tables Citus already has
    are skipped, so running it again changes nothing."""
    citus = {name for name, role in roles.items() if role.kind != LOCAL and name in tables}
    keys = [(name, fk) for name in sorted(citus) for fk in tables[name].foreign_keys if fk.target in citus]
    lines = ["BEGIN;", "SET LOCAL citus.multi_shard_modify_mode TO 'sequential';"]
    lines += [f'ALTER TABLE {_sql_name(name)} DROP CONSTRAINT "{fk.name}";' for name, fk in keys]
    lines += [_unless_distributed(name, f"create_reference_table('{_sql_name(name)}')") for name in sorted(citus)
              if roles[name].kind == REFERENCE]
    lines += [f"""SELECT create_distributed_function('{signature.replace("'", "''")}');""" for signature in functions]
    order = sorted((name for name in citus if roles[name].kind == DISTRIBUTED),
                   key=lambda name: (roles[name].colocate_with is not None, name))
    for name in order:
        role = roles[name]
        colocate = f", colocate_with => '{_sql_name(role.colocate_with)}'" if role.colocate_with else ""
        lines.append(_unless_distributed(name, f"create_distributed_table('{_sql_name(name)}', '{role.column}'{colocate})"))
    lines += [f'ALTER TABLE {_sql_name(name)} ADD CONSTRAINT "{fk.name}" {fk.definition};' for name, fk in keys]
    lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


def _unless_distributed(name: str, call: str) -> str:
    return (f"SELECT {call} WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition "  # noqa: S608  (catalog names)
            f"WHERE logicalrelid = '{_sql_name(name)}'::regclass);")


def _sql_name(name: str) -> str:
    return ".".join(f'"{part}"' for part in name.split("."))


# --- the tenant reaches the database as SET LOCAL only -------------------------------------------------

PRODUCT_PACKAGES = ("tenants", "kb", "agents", "api")
ALLOWED_SET_CONFIG = {
    # Runs on the coordinator before any table is distributed: a new cluster migrates empty tables (the loop
    # finds no tenant); an installation moving onto Citus applied it long before (docs/scaling.md).
    "kb/migrations/0005_sentence_lexemes.py",
}
_SET_CONFIG = re.compile(r"\bset_config\s*\(", re.IGNORECASE)
_SESSION_SET = re.compile(r"\bSET\s+(?:SESSION\s+)?app\.", re.IGNORECASE)


def _string_constants(source: str) -> Iterable[tuple[int, str]]:
    """(line, text) of every string constant of a module except docstrings (the SQL it can send)."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def check_tenant_setting_source(sources: Mapping[str, str]) -> list[Finding]:
    """Every string a module of `sources` (path -> text) could send that sets a setting other than with
    `SET LOCAL`: a set_config call or a session-level `SET app.`; allowed files that no longer need
    their exception are reported too, so the list stays true."""
    found = []
    for path, text in sorted(sources.items()):
        hits = [(line, value) for line, value in _string_constants(text)
                if _SET_CONFIG.search(value) or _SESSION_SET.search(value)]
        if path in ALLOWED_SET_CONFIG:
            continue
        found += [Finding(f"{path}:{line}", "SET LOCAL", "sets a setting other than with SET LOCAL (Citus passes only "
                          f"SET LOCAL on to workers): {' '.join(value.split())[:120]}") for line, value in hits]
    for path in sorted(ALLOWED_SET_CONFIG & set(sources)):
        if not _SET_CONFIG.search(sources[path]):
            found.append(Finding(path, "SET LOCAL", "allowed a set_config call it no longer has: drop the exception"))
    return found


def product_sources(root: Path) -> dict[str, str]:
    """path (relative to `root`) -> text of every Python module of the product packages."""
    return {str(path.relative_to(root)): path.read_text(encoding="utf-8")
            for package in PRODUCT_PACKAGES for path in sorted((root / package).rglob("*.py"))}
