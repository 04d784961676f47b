"""Run traces: row-level security per tenant, and append-only triggers (UPDATE/DELETE rejected)."""
from django.db import migrations

from tenants.rls import enable_rls

TABLES = ["agents_run", "agents_runstep", "agents_citation"]

APPEND_ONLY_FUNCTION = """
CREATE OR REPLACE FUNCTION agents_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'agents audit rows are append-only: % on % rejected', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""


def trigger_sql(table: str) -> str:
    return (f'CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON "{table}" '
            f"FOR EACH ROW EXECUTE FUNCTION agents_reject_change()")


class Migration(migrations.Migration):
    dependencies = [("agents", "0001_run_trace")]

    operations = (
        [enable_rls(t) for t in TABLES]
        + [migrations.RunSQL(APPEND_ONLY_FUNCTION, "DROP FUNCTION IF EXISTS agents_reject_change() CASCADE")]
        + [migrations.RunSQL(trigger_sql(t), f'DROP TRIGGER IF EXISTS {t}_append_only ON "{t}"') for t in TABLES]
    )
