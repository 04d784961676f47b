"""The scoped search entry point's suite (tests/kb/test_retrieval.py) re-run with a real streaming standby as
the "replica" alias (tests/standby.py): `kb.retrieval.search` called without `using` reads the standby
(its RLS tenant set with SET LOCAL there, its prepared statements and side connections on it), and
what it finds is what the primary would have answered. Transactional: a standby sees only committed rows.
"""

from __future__ import annotations

import pytest

from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb import test_retrieval as suite

pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", "owner", "replica"]),
              pytest.mark.usefixtures("replica"), pytest.mark.xdist_group("replica")]

# Every test of the suite, with the fixture defined in its module, but those on a tenant holding one percent of
# 3,000 MiniLM-sized chunks: their fixture alone took 16 s per test here on a loaded machine (committed, then
# replayed), for path choices that do not depend on the database they read.
ONE_PERCENT = {"test_k_results_for_a_tenant_holding_one_percent", "test_hnsw_inside_a_caller_transaction_restores_planner_settings",
               "test_scope_smaller_than_stored_count_falls_back_to_exact"}
for _name, _value in vars(suite).items():
    if (_name.startswith("test_") and _name not in ONE_PERCENT) or _name == "two_tenants":
        globals()[_name] = _value

# Tests that search outside a transaction of their own: their statements must reach the standby.
READS_THE_REPLICA = {"test_other_tenants_and_departments_never_returned", "test_narrowing_filters",
                     "test_applied_filter_records_the_effective_scope", "test_hit_fields_and_scores",
                     "test_hybrid_beats_either_mode_alone",
                     "test_different_embedding_models_are_never_compared", "test_max_distance_and_mmr",
                     "test_keyword_scores_are_bm25", "test_keyword_candidates_from_rare_terms_with_fallback"}


@pytest.fixture(autouse=True)
def _searches_reached_the_standby(request, replica):
    before = replica.statements
    yield
    if request.node.originalname in READS_THE_REPLICA:
        assert replica.statements > before, "no search statement reached the replica"
