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
    assert "extractive" not in run.answer.lower()  # the mode is one note on the page, not a paragraph per answer
    with activate(scope):
        steps = run_steps(scope, run.id)
        cites = run_citations(scope, run.id)
    assert [s.ordinal for s in steps] == list(range(len(steps)))
    assert len(events) == len(steps)
    assert sum(1 for s in steps if s.name == "search") >= 2
    assert cites and all(c.verdict == "verified" for c in cites)
    assert chunks["secret"].id not in {cid for s in steps for cid in s.chunk_ids}


def test_department_auditors_see_only_runs_confined_to_their_departments(acme):
    from agents.access import access_run
    from agents.access import visible_runs as runs_for
    from tenants.scope import NotVisible
    from tests.factories import whole_tenant

    tenant, _, _ = acme
    eng, sales, whole = dept_scope(tenant, "Engineering"), dept_scope(tenant, "Sales"), whole_tenant(tenant)
    eng_run = ask(scope=eng, question="Hotel limit?", strategy="classic", provider="offline")
    whole_run = ask(scope=whole, question="Hotel limit?", strategy="classic", provider="offline")
    with activate(eng):
        assert [r.id for r in runs_for(eng)] == [eng_run.id]
        assert access_run(eng, eng_run.id).id == eng_run.id
        with pytest.raises(NotVisible):
            access_run(eng, whole_run.id)
        assert run_steps(eng, whole_run.id) == [] and run_citations(eng, whole_run.id) == []
    with activate(sales):
        assert list(runs_for(sales)) == []
    with activate(whole):
        assert {r.id for r in runs_for(whole)} == {eng_run.id, whole_run.id}
