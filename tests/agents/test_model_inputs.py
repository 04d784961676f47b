"""Every model call's input is recorded under the hash chain, compactly, and rebuilds exactly to what
the provider was sent (issue 29: "what the model saw, recorded"), the agentic final call included."""

from __future__ import annotations

import pytest

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.chain import clean_json, verify_tenant_chain
from agents.models import RunStep
from agents.prompts import as_recorded, rebuild
from agents.services import ask
from tenants.scope import activate
from tests.agents.conftest import RecordingOffline
from tests.factories import whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


@pytest.mark.parametrize("strategy", ["agentic", "classic", "pipeline", "auto"])
def test_each_model_calls_input_is_recorded_and_rebuilds_exactly(acme, strategy):
    tenant, _, _ = acme
    scope = whole_tenant(tenant)
    provider = RecordingOffline()
    run = ask(scope=scope, question="What is the hotel limit per night, and how many days of annual leave do employees get?",
              strategy=strategy, provider=provider)
    with activate(scope):
        rows = list(RunStep.objects.for_scope(scope).filter(run_id=run.id).order_by("ordinal").values())
    calls = [r for r in rows if r["kind"] == "model_call" and not r["cached"]]
    assert run.outcome == "answered" and len(calls) == len(provider.requests) >= 1, (run.outcome, len(calls))
    for row, sent in zip(calls, provider.requests, strict=True):
        assert rebuild(rows, row["ordinal"]) == clean_json(as_recorded(sent)), row["ordinal"]
    final = calls[-1]
    assert rebuild(rows, final["ordinal"])["messages"], "the final call's input is in the record"
    if strategy == "agentic" and len(calls) > 1:  # the loop resends its conversation: stored once
        assert "prefix" in final["model_input"] and isinstance(final["model_input"]["system"], dict)
    with activate(scope):
        report = verify_tenant_chain(tenant.id, using="default")
    assert report.ok and report.runs_checked == 1


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_the_recorded_input_is_under_the_hash_chain():
    from django.db import connections, transaction

    from tests.agents.conftest import make_policy_corpus
    from tests.factories import make_tenant

    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    run = ask(scope=scope, question="What is the hotel limit per night?", strategy="classic", provider="offline")
    assert verify_tenant_chain(tenant.id).runs_checked == 1
    with transaction.atomic(using="owner"), connections["owner"].cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute("UPDATE agents_runstep SET model_input = jsonb_set(model_input, '{max_output_tokens}', '1') "
                    "WHERE tenant_id = %s AND run_id = %s AND kind = 'model_call'", [tenant.id, run.id])
    report = verify_tenant_chain(tenant.id)
    assert not report.ok and report.first_break.run_id == run.id and "hash mismatch" in report.first_break.reason
