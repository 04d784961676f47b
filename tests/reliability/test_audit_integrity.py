"""Audit integrity: a one-byte change in any column of any stored run, step or citation row is reported
by chain verification, and the application role can change none of them.

The forger here is the database superuser with triggers switched off (session_replication_role =
replica): the strongest attacker the chain is meant to expose. Each change is rolled back after
verification, so every column is tried against an intact chain.
"""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, IntegrityError, connections, transaction
from psycopg.types.json import Jsonb

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.chain import verify_tenant_chain
from agents.models import Citation, Run, RunStep
from agents.services import ask
from tenants.scope import activate
from tests.agents.conftest import make_policy_corpus
from tests.factories import make_tenant, whole_tenant

QUESTIONS = ["Which leave applies to personal days added to a business trip?", "What is the hotel limit in capital cities?",
             "How many days of annual leave do employees receive?"]


def one_byte_changed(value):
    """`value` with exactly one byte (character, digit or flag) changed, staying valid for its column type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value ^ 1
    if isinstance(value, float):
        return value + 1.0
    if isinstance(value, dt.datetime):
        return value + dt.timedelta(microseconds=1)
    if isinstance(value, str):
        if not value:
            return "x"
        last = value[-1]
        return value[:-1] + ("y" if last != "y" else "z")
    if isinstance(value, dict | list):
        text = json.dumps(value)
        for i in range(len(text) - 1, -1, -1):  # flip the last digit or letter that keeps the JSON valid
            ch = text[i]
            if ch.isalnum():
                swapped = text[:i] + ("1" if ch == "0" else "0" if ch.isdigit() else ("y" if ch != "y" else "z")) + text[i + 1:]
                try:
                    changed = json.loads(swapped)
                except ValueError:
                    continue
                if changed != value:
                    return changed
        return [*value, 0] if isinstance(value, list) else {**value, "x": 0}
    if value is None:
        return None
    raise TypeError(f"no one-byte change for {type(value).__name__}")


def _tamper_and_verify(table: str, column: str, row_id: int, tenant_id: int, is_json: bool,
                       is_int: bool = False) -> tuple[bool, object]:
    """Change one byte of row `row_id`.`column` as the superuser, verify the chain, roll back.

    Returns (detected, break). (True, None) if the database itself refused the change."""
    owner = connections["owner"]
    try:
        with transaction.atomic(using="owner"):
            with owner.cursor() as cur:
                cur.execute("SET LOCAL session_replication_role = replica")
                cur.execute(f'SELECT "{column}" FROM {table} WHERE id = %s', [row_id])
                value = cur.fetchone()[0]
                if is_json and isinstance(value, str):  # Django reads jsonb as text
                    value = json.loads(value)
                changed = one_byte_changed(value)
                if changed is None:  # NULL column: setting a value is the smallest change
                    changed = 0 if column.endswith("_id") else 1 if is_int else "x"
                cur.execute(f'UPDATE {table} SET "{column}" = %s WHERE id = %s',
                            [Jsonb(changed) if isinstance(changed, dict | list) else changed, row_id])
            report = verify_tenant_chain(tenant_id, using="owner")
            raise _Rollback(report)
    except _Rollback as rb:
        return (not rb.report.ok), rb.report.first_break
    except IntegrityError:
        return True, None


class _Rollback(Exception):
    def __init__(self, report) -> None:
        self.report = report


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
@pytest.mark.tenantless_sql("adversarial: a forger's one-byte edits as the owner, by row id")
def test_one_byte_change_in_any_trace_column_breaks_the_chain(reliability):
    """Audit integrity: a one-byte change in any column of a run, step or citation row is detected"""
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    runs = [ask(scope=whole_tenant(tenant), question=q, strategy=s, provider="offline")
            for q, s in zip(QUESTIONS, ("agentic", "classic", "pipeline"), strict=True)]
    assert verify_tenant_chain(tenant.id).ok
    target = runs[1]
    with activate(whole_tenant(tenant)):
        step = RunStep.objects.for_scope(whole_tenant(tenant)).filter(run_id=target.id).order_by("-ordinal").first()
        citation = Citation.objects.for_scope(whole_tenant(tenant)).filter(run_id=target.id).first()
    assert step is not None and citation is not None, "the target run needs steps and citations"
    undetected, named, tried = [], 0, 0
    for model, row_id in ((Run, target.id), (RunStep, step.id), (Citation, citation.id)):
        for f in model._meta.concrete_fields:
            tried += 1
            detected, brk = _tamper_and_verify(model._meta.db_table, f.column, row_id, tenant.id, f.get_internal_type() == "JSONField",
                                               f.get_internal_type().endswith("IntegerField"))
            if not detected:
                undetected.append(f"{model._meta.db_table}.{f.column}")
            elif brk is not None and brk.run_id == target.id:
                named += 1
    assert verify_tenant_chain(tenant.id).ok, "every tamper was rolled back"
    reliability.tried(tried, "columns tampered (one byte each)")
    reliability.figure("breaks naming the tampered run", f"{named}/{tried}")
    assert not undetected, f"one-byte changes the chain did not detect: {undetected}"


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
@pytest.mark.tenantless_sql("adversarial: a forger's edit as the owner, by row id")
def test_verify_chain_command_reports_a_changed_citation_byte(reliability):
    """Audit integrity: `manage.py verify_chain` exits non-zero and names the run after a one-byte change"""
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    run = ask(scope=whole_tenant(tenant), question=QUESTIONS[0], strategy="agentic", provider="offline")
    with transaction.atomic(using="owner"), connections["owner"].cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute("UPDATE agents_citation SET quoted_text = overlay(quoted_text placing 'Q' from 1 for 1) "
                    "WHERE id = (SELECT min(id) FROM agents_citation WHERE run_id = %s)", [run.id])
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("verify_chain", tenant=tenant.slug, stdout=out)
    reliability.tried(1, "verify_chain runs")
    assert f"run {run.id}" in out.getvalue() and "BROKEN" in out.getvalue()


@pytest.mark.django_db(databases=["default", "owner"])
@pytest.mark.tenantless_sql("adversarial: every UPDATE, DELETE and TRUNCATE the application role could try")
def test_app_role_cannot_change_any_column_of_finished_runs(reliability):
    """Audit integrity: UPDATE of every column, DELETE and TRUNCATE of trace rows fail for the application role"""
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    run = ask(scope=whole_tenant(tenant), question=QUESTIONS[0], strategy="agentic", provider="offline")
    statements = []
    for model in (Run, RunStep, Citation):
        table = model._meta.db_table
        key = "id" if model is Run else "run_id"
        statements += [f'UPDATE {table} SET "{f.column}" = "{f.column}" WHERE {key} = {run.id}' for f in model._meta.concrete_fields]
        statements += [f"DELETE FROM {table} WHERE {key} = {run.id}", f"TRUNCATE {table} CASCADE"]
    allowed = []
    for sql in statements:
        try:
            with transaction.atomic(using="default"), activate(whole_tenant(tenant)), connections["default"].cursor() as cur:
                cur.execute(sql)
                allowed.append(sql)
        except DatabaseError:
            pass
    reliability.tried(len(statements), "statements as the app role")
    assert not allowed, f"the application role could run: {allowed}"
