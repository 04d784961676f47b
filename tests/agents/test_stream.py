"""stream_ask yields each step as it happens and the stored run last (what the API sends over SSE)."""

from __future__ import annotations

import json

import pytest

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.selectors import run_steps
from agents.services import InvalidQuestion, stream_ask
from tenants.scope import activate
from tests.agents.conftest import make_policy_corpus
from tests.factories import make_tenant, whole_tenant


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_stream_yields_steps_then_the_run():
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    events = list(stream_ask(scope=scope, question="How much is a hotel night, and how many days of annual leave are there?",
                             provider="offline"))
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "run" and set(kinds[:-1]) <= {"step", "ping"}
    steps = [e["data"] for e in events if e["event"] == "step"]
    json.dumps(events)  # SSE-ready
    run = events[-1]["data"]
    assert run["outcome"] == "answered" and run["grounded"]
    with activate(scope):
        stored = run_steps(scope, run["id"])
    assert [s["ordinal"] for s in steps] == [s.ordinal for s in stored]
    assert [s["name"] for s in steps] == [s.name for s in stored]


def test_stream_validates_before_the_first_event():
    with pytest.raises(InvalidQuestion):
        stream_ask(scope=None, question="  ", provider="offline")  # type: ignore[arg-type]
