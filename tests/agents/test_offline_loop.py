"""The offline provider drives the real loop and tools over a small corpus and cites what it found."""

from __future__ import annotations

import pytest

from agents.selectors import run_citations, run_steps
from agents.services import ask
from tenants.scope import activate
from tests.factories import dept_scope

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

MULTI = ("My business trip is extended with personal days: which travel costs can be claimed, "
         "and which leave applies to the personal days?")


def test_multi_part_question_is_answered_with_verified_citations(acme):
    tenant, _, chunks = acme
    scope = dept_scope(tenant, "Engineering")
    events = []
    run = ask(scope=scope, question=MULTI, strategy="agentic", provider="offline", on_step=events.append)
    print(run.answer)
    assert run.outcome == "answered", run.answer
    assert run.grounded
    assert f"[c:{chunks['travel2'].id}]" in run.answer
    assert f"[c:{chunks['leave0'].id}]" in run.answer
    assert "extractive" in run.answer.lower()
    with activate(scope):
        steps = run_steps(scope, run.id)
        cites = run_citations(scope, run.id)
    assert [s.ordinal for s in steps] == list(range(len(steps)))
    assert len(events) == len(steps)
    assert sum(1 for s in steps if s.name == "search") >= 2
    assert cites and all(c.verdict == "verified" for c in cites)
    assert chunks["secret"].id not in {cid for s in steps for cid in s.chunk_ids}
