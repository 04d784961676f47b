"""Whatever a model puts in tool arguments survives the jsonb round trip unchanged, so the chain verifies."""

from __future__ import annotations

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.budgets import Budgets
from agents.chain import verify_tenant_chain
from agents.loop import RunState, StepRecord
from agents.providers.offline import OfflineProvider
from agents.services import record_run
from agents.tools import ToolDeps
from tenants.scope import activate
from tests.factories import make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**62), 2**62) | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(arguments=st.dictionaries(st.text(max_size=12), json_values, max_size=5), output=st.text(max_size=200),
       latency=st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_arbitrary_arguments_round_trip_and_verify(arguments, output, latency):
    tenant = make_tenant()
    scope = whole_tenant(tenant)
    budgets = Budgets()
    state = RunState(question="q\x00uestion " + output[:20], budgets=budgets, provider=OfflineProvider(),
                     deps=ToolDeps(scope=scope, budgets=budgets))
    state.steps = [StepRecord(ordinal=0, kind="tool_call", name="search", arguments=arguments, output=output, latency_ms=latency,
                              effective_filter={"nested": arguments}, chunk_ids=[1, 2], content_hashes=["a", "b"])]
    record_run(scope=scope, state=state, result=None, error="boom\x00", strategy_requested="agentic", created_at=timezone.now(),
               latency_ms=latency)
    with activate(scope):
        report = verify_tenant_chain(tenant.id, using="default")
    assert report.ok, (report.first_break, repr(arguments), repr(output), latency)
