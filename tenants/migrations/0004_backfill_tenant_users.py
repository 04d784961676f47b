"""Give existing users their home tenant: a user whose memberships are all in one tenant belongs to it
(tenants.models.TenantUser). Users with memberships in several tenants get no home: an operator
decides. Runs as the owner (migrations), so row-level security does not hide the rows."""

from django.db import migrations


def backfill(apps, schema_editor):
    membership = apps.get_model("tenants", "Membership")
    tenant_user = apps.get_model("tenants", "TenantUser")
    db = schema_editor.connection.alias
    homed = set(tenant_user.objects.using(db).values_list("user_id", flat=True))
    tenants_of: dict[int, set[int]] = {}
    for user_id, tenant_id in membership.objects.using(db).values_list("user_id", "tenant_id"):
        tenants_of.setdefault(user_id, set()).add(tenant_id)
    tenant_user.objects.using(db).bulk_create([
        tenant_user(user_id=user_id, tenant_id=next(iter(tenants)))
        for user_id, tenants in sorted(tenants_of.items()) if len(tenants) == 1 and user_id not in homed])


class Migration(migrations.Migration):
    dependencies = [("tenants", "0003_row_level_security")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
