"""The ask suites (the offline loop end to end, tests/agents/test_offline_loop.py, and the agent's tools,
tests/agents/test_tools.py) re-run with a real streaming standby as the "replica" alias (tests/standby.py):
the run's searches read the standby, the run itself is written to the primary and read back there.
Transactional: a standby sees only committed rows.
"""

from __future__ import annotations

import pytest

from tests.agents import test_offline_loop as loop_suite
from tests.agents import test_tools as tools_suite
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", "owner", "replica"]),
              pytest.mark.usefixtures("replica"), pytest.mark.xdist_group("replica")]

for _suite in (loop_suite, tools_suite):
    for _name, _value in vars(_suite).items():
        if _name.startswith("test_"):
            globals()[_name] = _value

# Tests whose searches run outside a transaction of their own: their statements must reach the standby.
READS_THE_REPLICA = {"test_multi_part_question_is_answered_with_verified_citations",
                     "test_department_auditors_see_only_runs_confined_to_their_departments",
                     "test_search_output_is_labelled_data_and_truncated_to_budget",
                     "test_search_narrowing_cannot_widen_department_scope"}


@pytest.fixture(autouse=True)
def _searches_reached_the_standby(request, replica):
    before = replica.statements
    yield
    if request.node.originalname in READS_THE_REPLICA:
        assert replica.statements > before, "no search statement reached the replica"
