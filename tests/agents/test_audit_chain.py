"""Runs are append-only and hash-chained per tenant; verify_chain names the first broken link."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connections, transaction

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.chain import GENESIS, run_hash, verify_tenant_chain
from agents.models import Citation, Run, RunStep
from agents.services import ask
from tenants.scope import activate
from tests.agents.conftest import make_policy_corpus
from tests.factories import make_tenant, whole_tenant

QUESTION = "Which leave applies to personal days added to a business trip?"


def _ask(tenant, n: int = 1) -> list[Run]:
    return [ask(scope=whole_tenant(tenant), question=f"{QUESTION} ({i})", strategy="agentic", provider="offline") for i in range(n)]


@pytest.mark.django_db(databases=["default", "owner"])
@pytest.mark.tenantless_sql("adversarial: forged changes to the trace tables are refused whatever they name")
def test_app_role_cannot_update_delete_or_truncate_trace_rows():
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    run = _ask(tenant)[0]
    assert run.outcome == "answered" and run.grounded
    statements = [f"UPDATE agents_run SET answer = 'forged' WHERE id = {run.id}", f"DELETE FROM agents_run WHERE id = {run.id}",
                  f"UPDATE agents_runstep SET output = 'x' WHERE run_id = {run.id}", f"DELETE FROM agents_runstep WHERE run_id = {run.id}",
                  f"UPDATE agents_citation SET verdict = 'verified' WHERE run_id = {run.id}",
                  f"DELETE FROM agents_citation WHERE run_id = {run.id}",
                  "TRUNCATE agents_run CASCADE", "TRUNCATE agents_runstep", "TRUNCATE agents_citation"]
    for sql in statements:
        with (pytest.raises(DatabaseError), transaction.atomic(using="default"), activate(whole_tenant(tenant)),
              connections["default"].cursor() as cur):
            cur.execute(sql)
    # The ORM path is refused the same way.
    with pytest.raises(DatabaseError), transaction.atomic(using="default"), activate(whole_tenant(tenant)):
        Run.objects.for_scope(whole_tenant(tenant)).filter(pk=run.id).update(answer="forged")


@pytest.mark.django_db(databases=["default", "owner"])
@pytest.mark.tenantless_sql("adversarial: the owner's forged changes are refused by the triggers")
def test_triggers_reject_changes_even_for_the_owner():
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    run = _ask(tenant)[0]
    with connections["owner"].cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'agents_%%_append_only'")
        assert cur.fetchone()[0] == 4  # runs, steps, citations, feedback
    with connections["default"].cursor() as cur:  # rows are readable only inside the tenant
        cur.execute("SELECT count(*) FROM agents_run WHERE id = %s", [run.id])
        assert cur.fetchone()[0] == 0


@pytest.mark.django_db(databases=["default", "owner"])
def test_runs_chain_per_tenant():
    a, b = make_tenant("Acme"), make_tenant("Globex")
    make_policy_corpus(a)
    make_policy_corpus(b)
    ra = _ask(a, 2)
    rb = _ask(b, 1)
    assert [r.seq for r in ra] == [1, 2] and rb[0].seq == 1
    assert ra[0].prev_hash == GENESIS and ra[1].prev_hash == ra[0].hash and rb[0].prev_hash == GENESIS
    with activate(whole_tenant(a)):
        report = verify_tenant_chain(a.id, using="default")
    assert report.ok and report.runs_checked == 2


def _tamper(sql: str, params: list) -> None:
    """What an attacker with the database superuser could do: bypass triggers and edit a row."""
    with transaction.atomic(using="owner"), connections["owner"].cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute(sql, params)


def _verify(tenant) -> str:
    out = io.StringIO()
    try:
        call_command("verify_chain", tenant=tenant.slug, stdout=out)
    except CommandError as exc:
        return out.getvalue() + str(exc)
    return out.getvalue()


TAMPERS = {
    "run answer": ("UPDATE agents_run SET answer = answer || ' ' WHERE id = %s", "run"),
    "run grounded": ("UPDATE agents_run SET grounded = NOT grounded WHERE id = %s", "run"),
    "step output": ("UPDATE agents_runstep SET output = output || 'x' "
                    "WHERE id = (SELECT min(id) FROM agents_runstep WHERE run_id = %s)", "run"),
    "step chunk ids": ("UPDATE agents_runstep SET chunk_ids = '[1]'::jsonb "
                       "WHERE id = (SELECT max(id) FROM agents_runstep WHERE run_id = %s AND kind = 'tool_call')", "run"),
    "citation verdict": ("UPDATE agents_citation SET reason = reason || '.' WHERE id = (SELECT min(id) FROM agents_citation "
                         "WHERE run_id = %s)", "run"),
    "deleted step": ("DELETE FROM agents_runstep WHERE id = (SELECT max(id) FROM agents_runstep WHERE run_id = %s)", "run"),
    "rewritten hash": ("UPDATE agents_run SET hash = md5(hash) || md5(hash) WHERE id = %s", "run"),
    "rewritten run with recomputed hash": (None, "next"),
    "deleted run": ("DELETE FROM agents_run WHERE id = %s", "next"),
}


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
@pytest.mark.parametrize("what", list(TAMPERS))
@pytest.mark.tenantless_sql("adversarial: a forger's edits as the database owner, by row id")
def test_verify_chain_names_the_first_broken_run(what):
    tenant = make_tenant("Acme")
    other = make_tenant("Globex")
    make_policy_corpus(tenant)
    make_policy_corpus(other)
    runs = _ask(tenant, 3)
    _ask(other, 1)
    assert "OK" in _verify(tenant), _verify(tenant)
    sql, blamed = TAMPERS[what]
    if what == "deleted run":
        _tamper("DELETE FROM agents_citation WHERE run_id = %s", [runs[1].id])
        _tamper("DELETE FROM agents_runstep WHERE run_id = %s", [runs[1].id])
    if sql is None:  # a careful forger: change the answer and recompute that run's own hash
        _tamper("UPDATE agents_run SET answer = 'forged' WHERE id = %s", [runs[1].id])
        forged = Run.objects.unscoped_dangerously("owner").get(pk=runs[1].id)
        steps = list(RunStep.objects.unscoped_dangerously("owner").filter(run_id=forged.id))
        cites = list(Citation.objects.unscoped_dangerously("owner").filter(run_id=forged.id))
        _tamper("UPDATE agents_run SET hash = %s WHERE id = %s", [run_hash(forged, steps, cites), forged.id])
    else:
        _tamper(sql, [runs[1].id])
    report = _verify(tenant)
    expected = runs[1] if blamed == "run" else runs[2]
    assert f"run {expected.id} (seq {expected.seq})" in report, report
    assert "BROKEN" in report
    assert "OK" in _verify(other)  # another tenant's chain is untouched
