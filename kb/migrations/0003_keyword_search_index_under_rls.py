"""Let the GIN full-text index serve queries under row-level security.

Under RLS a query's own conditions may only be used as index conditions when their functions are
LEAKPROOF (otherwise PostgreSQL evaluates the tenant policy first, row by row): `search_vector @@
tsquery` (ts_match_vq) is not marked so, and keyword search read every tsvector of the tenant
(a sequential scan: ~480 ms at 100,000 chunks instead of an index lookup). ts_match_vq only returns
a boolean computed from its arguments (no data-dependent errors), so it is marked LEAKPROOF in this
database (pg_proc is per database). Needs a superuser (the embedded server's owner role is one);
without one the migration leaves the function alone and keyword search stays correct but slow.
"""

from django.db import migrations

_SQL = """
DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) {mode};
    ELSE
        RAISE NOTICE 'not a superuser: ts_match_vq left as is, keyword search cannot use the GIN index under RLS';
    END IF;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("kb", "0002_row_level_security")]

    operations = [migrations.RunSQL(_SQL.format(mode="LEAKPROOF"), _SQL.format(mode="NOT LEAKPROOF"))]
