"""The tenants app's tables keyed by tenant (Citus distributes them by `tenant_id`, co-located; issue 50).

- The department link tables of members and API keys become explicit through models (same tables) and get
  a `tenant_id`: filled from the parent row, NOT NULL, defaulting to the transaction's proven tenant
  (`grounded_tenant()`, so Django's `.set()`/`.add()` need no through_defaults), unique with
  (tenant_id, parent, department), and their policy is `tenant_id = grounded_tenant()` instead of 0003's
  EXISTS subqueries. Their keys are checked at each statement: a link to another tenant's department (or
  parent) fails when written, as 0003's policy refused it.
- Primary keys (tenant_id, id) on departments, API keys, memberships and the link tables, (tenant_id,
  user_id) on users' homes (user_id still unique: one home per user); every foreign key pointing at them (the kb and agents tables' department
  keys included, hence the dependencies on those apps) becomes (tenant_id, x_id) (tenants.tenant_keys).
  tenants_tenant keeps its id key.
- An API key's public id is unique per tenant (indexed alone for the look-up before its tenant is known).
- Every row-level security policy of the public schema: `(SELECT grounded_tenant())` becomes the bare call
  (Citus refuses subqueries in policies); the migration fails if any policy still holds a subquery.

No row is rewritten except the link tables' new column. Reversible (the policies keep the bare call, which
0007's code reads alike).
"""
import importlib

import django.db.models.deletion
from django.db import migrations, models

from tenants.rls import INITPLAN_TENANT_EXPR, TENANT_EXPR, rewrite_policies_sql
from tenants.tenant_keys import checked_at_once, key_by_tenant

LINK_POLICY_0003 = importlib.import_module("tenants.migrations.0003_row_level_security").link_policy

# (link table, parent table, parent column, the unique constraint Django made for the pair)
LINKS = [
    ("tenants_membership_departments", "tenants_membership", "membership_id",
     "tenants_membership_depar_membership_id_department_94f1df68_uniq"),
    ("tenants_apikey_departments", "tenants_apikey", "apikey_id",
     "tenants_apikey_departmen_apikey_id_department_id_135f134f_uniq"),
]


def link_tenant_column(table: str, parent: str, column: str, pair_unique: str) -> migrations.RunSQL:
    """`table` gets its parent's tenant_id (NOT NULL, default the proven tenant, a key to tenants_tenant)
    and loses the pair's unique constraint (the model's, with the tenant, is added after)."""
    policy = f"tenant_id = {TENANT_EXPR}"
    return migrations.RunSQL(
        sql=[
            f'ALTER TABLE "{table}" ADD COLUMN tenant_id bigint NULL',
            f'UPDATE "{table}" l SET tenant_id = p.tenant_id FROM "{parent}" p WHERE p.id = l.{column}',
            f'ALTER TABLE "{table}" ALTER COLUMN tenant_id SET NOT NULL',
            f'ALTER TABLE "{table}" ALTER COLUMN tenant_id SET DEFAULT grounded_tenant()',
            f'ALTER TABLE "{table}" ADD CONSTRAINT "{table}_tenant_id_fk_tenants_tenant_id" FOREIGN KEY (tenant_id) '
            'REFERENCES tenants_tenant (id) DEFERRABLE INITIALLY DEFERRED',
            f'CREATE INDEX "{table}_tenant_id" ON "{table}" (tenant_id)',
            f'ALTER TABLE "{table}" DROP CONSTRAINT "{pair_unique}"',
            f'DROP POLICY tenant_isolation ON "{table}"',
            f'CREATE POLICY tenant_isolation ON "{table}" USING ({policy}) WITH CHECK ({policy})',
        ],
        reverse_sql=[
            f'DROP POLICY tenant_isolation ON "{table}"',
            LINK_POLICY_0003(table, parent, column).sql[2],
            f'ALTER TABLE "{table}" ADD CONSTRAINT "{pair_unique}" UNIQUE ({column}, department_id)',
            f'ALTER TABLE "{table}" DROP COLUMN tenant_id',
        ],
    )


def link_model(name: str, parent: str, parent_field: str, table: str) -> migrations.CreateModel:
    return migrations.CreateModel(
        name=name,
        fields=[
            ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
            (parent_field, models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE,
                                             to=f"tenants.{parent}")),
            ("department", models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE,
                                             to="tenants.department")),
            ("tenant", models.ForeignKey(db_default=models.Func(function="grounded_tenant", output_field=models.BigIntegerField()),
                                         on_delete=django.db.models.deletion.CASCADE, related_name="+", to="tenants.tenant")),
        ],
        options={"db_table": table},
    )


NO_SUBQUERY_LEFT = """
    DO $policies$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = 'public'
                   AND (qual ILIKE '%select%' OR with_check ILIKE '%select%')) THEN
            RAISE EXCEPTION 'a row-level security policy still holds a subquery (Citus refuses them): rewrite it';
        END IF;
    END
    $policies$
"""


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0007_database_wall"),
        # Their keys to tenants_department are converted here, with its primary key.
        ("kb", "0010_halfvec_storage"),
        ("agents", "0009_runstep_model_input_help"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                link_model("MembershipDepartment", "membership", "membership", "tenants_membership_departments"),
                migrations.AlterField(
                    model_name="membership", name="departments",
                    field=models.ManyToManyField(blank=True, through="tenants.MembershipDepartment", to="tenants.department")),
                link_model("ApiKeyDepartment", "apikey", "apikey", "tenants_apikey_departments"),
                migrations.AlterField(
                    model_name="apikey", name="departments",
                    field=models.ManyToManyField(blank=True, through="tenants.ApiKeyDepartment", to="tenants.department")),
            ],
            database_operations=[link_tenant_column(*link) for link in LINKS],
        ),
        migrations.AddConstraint(
            model_name="membershipdepartment",
            constraint=models.UniqueConstraint(fields=("tenant", "membership", "department"), name="uniq_membership_department"),
        ),
        migrations.AddConstraint(
            model_name="apikeydepartment",
            constraint=models.UniqueConstraint(fields=("tenant", "apikey", "department"), name="uniq_apikey_department"),
        ),
        migrations.AlterField(
            model_name="apikey", name="public_id",
            field=models.CharField(db_index=True, editable=False, max_length=16),
        ),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.UniqueConstraint(fields=("tenant", "public_id"), name="uniq_apikey_public_id"),
        ),
        key_by_tenant("tenants_department"),
        key_by_tenant("tenants_membership"),
        key_by_tenant("tenants_apikey"),
        key_by_tenant("tenants_tenantuser", "user_id"),
        # One home per user still: another tenant's row for the same user would pass the auth_user guard (0006) there.
        # tenants_tenantuser is a Citus reference table (tenants.distribution), where a unique key needs no tenant.
        migrations.RunSQL('ALTER TABLE "tenants_tenantuser" ADD CONSTRAINT tenants_tenantuser_one_home UNIQUE (user_id)',
                          reverse_sql='ALTER TABLE "tenants_tenantuser" DROP CONSTRAINT tenants_tenantuser_one_home'),
        key_by_tenant("tenants_membership_departments"),
        key_by_tenant("tenants_apikey_departments"),
        *[checked_at_once(table, referenced) for table, parent, _, _ in LINKS for referenced in (parent, "tenants_department")],
        migrations.RunSQL(rewrite_policies_sql(INITPLAN_TENANT_EXPR, TENANT_EXPR, "%SELECT grounded_tenant%"),
                          reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(NO_SUBQUERY_LEFT, reverse_sql=migrations.RunSQL.noop),
    ]
