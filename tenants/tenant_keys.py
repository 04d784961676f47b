"""Migration operations that key tenant-owned tables by tenant, the shape Citus distributes by `tenant_id`.

django-multitenant's pattern: Django keeps `id` (or a one-to-one's column) as the model's primary key and
its foreign keys between tenant tables are `db_constraint=False`; the database holds the real keys:

- `PRIMARY KEY (tenant_id, id)` on every tenant-owned table (`key_by_tenant`);
- every foreign key between two tenant tables as `(tenant_id, x_id) REFERENCES t (tenant_id, id)`, with the
  action and deferrability it had (`key_by_tenant` converts the keys that point at the table it re-keys,
  whichever app owns them, so the order of the calls is free);
- foreign keys to `tenants_tenant` and `auth_user` are left as they are (those tables stay keyed by id).

Every operation reads the catalog, so it applies to any database built by this project's migrations, and
reverses exactly: the primary key back to the column alone, the composite keys back to one column. No row
is rewritten; PostgreSQL checks each re-created key against the rows (a full scan of the referencing table).
"""

from __future__ import annotations

from django.db.migrations.operations import RunSQL

# pg_get_constraintdef's text of a one-column and of a tenant-keyed foreign key, and each one's other form.
ONE_COLUMN_FK = r"^FOREIGN KEY \((\w+)\) REFERENCES ([^\s(]+)\((\w+)\)"
TENANT_FK = r"^FOREIGN KEY \(tenant_id, (\w+)\) REFERENCES ([^\s(]+)\(tenant_id, (\w+)\)"
TO_TENANT_FK = r"FOREIGN KEY (tenant_id, \1) REFERENCES \2(tenant_id, \3)"
TO_ONE_COLUMN_FK = r"FOREIGN KEY (\1) REFERENCES \2(\3)"


def rekey_sql(table: str, column: str, *, by_tenant: bool) -> str:
    """A DO block: `table`'s primary key becomes (tenant_id, `column`) (`by_tenant`) or (`column`) alone, and the
    foreign keys that point at it are converted to match, keeping their names, actions and deferrability.

    Fails (and so rolls the migration back) if a key pointing at the table is of neither form."""
    if by_tenant:
        referenced, pattern, replacement, key = f"ARRAY[{attnum_sql(table, column)}]", ONE_COLUMN_FK, TO_TENANT_FK, f"tenant_id, {column}"
    else:
        referenced = f"ARRAY[{attnum_sql(table, 'tenant_id')}, {attnum_sql(table, column)}]"
        pattern, replacement, key = TENANT_FK, TO_ONE_COLUMN_FK, column
    return f"""
    DO $keys$
    DECLARE
        fk record;
        converted text;
        readd text[] := ARRAY[]::text[];
        statement text;
        pk name;
    BEGIN
        FOR fk IN SELECT c.conname, c.conrelid::regclass AS source, pg_get_constraintdef(c.oid) AS def
                  FROM pg_constraint c
                  WHERE c.contype = 'f' AND c.confrelid = '{table}'::regclass AND c.confkey = {referenced}
                  ORDER BY c.conrelid::regclass::text, c.conname LOOP
            converted := regexp_replace(fk.def, '{pattern}', '{replacement}');
            IF converted = fk.def THEN
                RAISE EXCEPTION 'foreign key % on % (%) is not of the expected form', fk.conname, fk.source, fk.def;
            END IF;
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.source, fk.conname);
            readd := readd || format('ALTER TABLE %s ADD CONSTRAINT %I %s', fk.source, fk.conname, converted);
        END LOOP;
        SELECT conname INTO pk FROM pg_constraint WHERE conrelid = '{table}'::regclass AND contype = 'p';
        EXECUTE format('ALTER TABLE "{table}" DROP CONSTRAINT %I', pk);
        EXECUTE format('ALTER TABLE "{table}" ADD CONSTRAINT %I PRIMARY KEY ({key})', pk);
        FOREACH statement IN ARRAY readd LOOP
            EXECUTE statement;
        END LOOP;
    END
    $keys$
    """  # noqa: S608  (identifiers from migrations, never from input)


def attnum_sql(table: str, column: str) -> str:
    """SQL: the attribute number of `table`.`column` (a scalar subquery on the catalog)."""
    return f"(SELECT attnum FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attname = '{column}')"  # noqa: S608


def key_by_tenant(table: str, column: str = "id") -> RunSQL:
    """Migration operation: `table` keyed by (tenant_id, `column`), the keys pointing at it by (tenant_id, x);
    reverses to the one-column key. `table` and every table referencing it must have a `tenant_id` column."""
    return RunSQL(rekey_sql(table, column, by_tenant=True), reverse_sql=rekey_sql(table, column, by_tenant=False))


def foreign_keys_sql(table: str, referenced: str, clause: str) -> str:
    """A DO block: every foreign key from `table` to `referenced` gets the deferrability `clause` (SQL, e.g.
    `NOT DEFERRABLE`)."""
    return f"""
    DO $keys$
    DECLARE
        fk record;
    BEGIN
        FOR fk IN SELECT conname FROM pg_constraint
                  WHERE contype = 'f' AND conrelid = '{table}'::regclass AND confrelid = '{referenced}'::regclass LOOP
            EXECUTE format('ALTER TABLE "{table}" ALTER CONSTRAINT %I {clause}', fk.conname);
        END LOOP;
    END
    $keys$
    """  # noqa: S608  (identifiers from migrations, never from input)


def checked_at_once(table: str, referenced: str) -> RunSQL:
    """Migration operation: the foreign keys from `table` to `referenced` are checked at each statement, not at
    commit (reverses to Django's DEFERRABLE INITIALLY DEFERRED)."""
    return RunSQL(foreign_keys_sql(table, referenced, "NOT DEFERRABLE"),
                  reverse_sql=foreign_keys_sql(table, referenced, "DEFERRABLE INITIALLY DEFERRED"))
