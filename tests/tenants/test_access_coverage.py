"""Every tenant-owned table sits behind row-level security, and every model the admin shows has a
visibility rule (or is Django's users and groups, for operators only): a new model, or a new app's
admin, that forgets either fails here, not in production."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connections

from tenants.access import has_visibility_rule
from tenants.admin import OperatorOnlyAdmin

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

OUR_APPS = {"tenants", "kb", "agents"}


def _rls_tables() -> dict[str, tuple[bool, bool, int]]:
    with connections["owner"].cursor() as cur:
        cur.execute("SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
                    "(SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) "
                    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'public' AND c.relkind = 'r'")
        return {name: (enabled, forced, policies) for name, enabled, forced, policies in cur.fetchall()}


def tenant_owned_tables() -> list[str]:
    """Tables of our apps' models with a tenant, the tenant table itself, and the link tables of their
    many-to-many fields (which carry no tenant column of their own)."""
    tables = []
    for model in apps.get_models(include_auto_created=True):
        if model._meta.app_label not in OUR_APPS:
            continue
        fields = {f.name for f in model._meta.get_fields()}
        owned = "tenant" in fields or model._meta.model_name == "tenant"
        linked = model._meta.auto_created and any(
            "tenant" in {f.name for f in rel.related_model._meta.get_fields()}
            for rel in model._meta.get_fields() if getattr(rel, "many_to_one", False))
        if owned or linked:
            tables.append(model._meta.db_table)
    return sorted(tables)


def test_every_tenant_owned_table_is_behind_row_level_security():
    rls = _rls_tables()
    tables = tenant_owned_tables()
    assert {"tenants_apikey", "tenants_membership", "tenants_department", "tenants_apikey_departments", "kb_chunk",
            "agents_run"} <= set(tables)
    missing = [t for t in tables if not (t in rls and rls[t][0] and rls[t][1] and rls[t][2] > 0)]
    assert not missing, f"tables without ENABLE + FORCE ROW LEVEL SECURITY and a policy: {missing}"


def test_every_admin_has_a_visibility_rule_or_is_for_operators_only():
    """Every registered admin: a model of ours with a visibility rule, or an operators-only admin (Django's
    users and groups). An admin of any other app (a new dependency's) fails here until it is one of them."""
    registry = admin.site._registry
    ours = [m for m in registry if m._meta.app_label in OUR_APPS]
    assert len(ours) >= 9
    assert [m.__name__ for m in ours if not has_visibility_rule(m)] == []
    others = {f"{m._meta.app_label}.{m.__name__}": registry[m] for m in registry if m._meta.app_label not in OUR_APPS}
    assert set(others) == {"auth.User", "auth.Group"}, f"admins of other apps: {sorted(others)}"
    assert all(isinstance(model_admin, OperatorOnlyAdmin) for model_admin in others.values()), others
