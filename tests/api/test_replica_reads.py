"""Read replicas on a real streaming standby (tests/standby.py): the API's search, ask and run suites
and the chat's conversations re-run with the standby as the "replica" alias, the router's rules, and the lag tests: with replay
paused, a run just stored is never a 404 nor missing for its asker, and search still works.

Transactional: a standby sees only committed rows.
"""

from __future__ import annotations

import time

import pytest
from django.db import connections
from django.db.utils import InternalError

from agents.access import access_run
from agents.models import Run
from kb.retrieval import search
from tenants import replicas
from tenants.scope import NotVisible, activate
from tests.api import test_conversations as chat_suite
from tests.api import test_search_ask_runs as suite
from tests.api.conftest import CANARY
from tests.factories import whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", "owner", "replica"]),
              pytest.mark.usefixtures("replica"), pytest.mark.xdist_group("replica")]

# The suite of tests/api/test_search_ask_runs.py, here against the replica (its stream test that runs off
# the request thread is left out: it names its own databases).
test_search_happy_path_and_filters = suite.test_search_happy_path_and_filters
test_search_another_tenants_corpus_filter_finds_nothing = suite.test_search_another_tenants_corpus_filter_finds_nothing
test_department_key_search_stays_in_its_departments = suite.test_department_key_search_stays_in_its_departments
test_search_bad_input = suite.test_search_bad_input
test_search_and_ask_roles_and_auth = suite.test_search_and_ask_roles_and_auth
test_ask_returns_a_cited_answer_and_the_run_is_auditable = suite.test_ask_returns_a_cited_answer_and_the_run_is_auditable
test_ask_bad_input = suite.test_ask_bad_input
test_runs_are_for_auditors_and_admins_and_tenant_private = suite.test_runs_are_for_auditors_and_admins_and_tenant_private
test_run_filters_bad_input = suite.test_run_filters_bad_input
test_daily_run_budget_is_429_with_retry_after = suite.test_daily_run_budget_is_429_with_retry_after
test_ask_stream_emits_steps_then_answer = suite.test_ask_stream_emits_steps_then_answer
test_department_auditor_sees_only_runs_confined_to_its_departments = (
    suite.test_department_auditor_sees_only_runs_confined_to_its_departments)

# The chat's conversations (tests/api/test_conversations.py), but for the key revoked mid-thread and the demo's
# follow-up (they name their own databases or rebuild the demo).
test_a_thread_with_a_follow_up_listed_and_read_back = chat_suite.test_a_thread_with_a_follow_up_listed_and_read_back
test_another_tenants_or_principals_conversation_is_not_found = chat_suite.test_another_tenants_or_principals_conversation_is_not_found
test_the_stream_sends_steps_then_answer_then_done = chat_suite.test_the_stream_sends_steps_then_answer_then_done
test_delete_hides_the_thread_from_its_owner_and_keeps_its_runs = chat_suite.test_delete_hides_the_thread_from_its_owner_and_keeps_its_runs
test_bad_input_is_a_400_on_its_field_and_roles_are_checked = chat_suite.test_bad_input_is_a_400_on_its_field_and_roles_are_checked

# Tests of the suites whose reads must have reached the standby (the others may stop at a 400, 401 or 403).
READS_THE_REPLICA = {"test_a_thread_with_a_follow_up_listed_and_read_back",
                     "test_delete_hides_the_thread_from_its_owner_and_keeps_its_runs",
                     "test_search_happy_path_and_filters", "test_search_another_tenants_corpus_filter_finds_nothing",
                     "test_department_key_search_stays_in_its_departments", "test_ask_returns_a_cited_answer_and_the_run_is_auditable",
                     "test_runs_are_for_auditors_and_admins_and_tenant_private",
                     "test_department_auditor_sees_only_runs_confined_to_its_departments", "test_ask_stream_emits_steps_then_answer"}


@pytest.fixture(autouse=True)
def _offline(settings):
    """The offline answer provider, as the chat suite asks (the search and ask suite's default anyway)."""
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


@pytest.fixture(autouse=True)
def _reads_reached_the_standby(request, replica):
    """Each suite test that reads must have sent statements to the standby."""
    replicas.reset()
    before = replica.statements
    yield
    if request.node.originalname in READS_THE_REPLICA:
        assert replica.statements > before, "no statement reached the replica"


def test_the_replica_alias_is_a_standby_in_recovery(replica):
    with connections["replica"].cursor() as cur:
        cur.execute("SELECT pg_is_in_recovery(), current_user")
        assert cur.fetchone() == (True, connections["default"].settings_dict["USER"])
        with pytest.raises(InternalError, match="read-only"):
            cur.execute("CREATE TABLE nope (x int)")
    assert replica.streaming()


def test_router_keeps_writes_and_migrations_off_the_replica(world, replica):
    router = replicas.ReplicaRouter()
    assert router.allow_migrate("replica", "agents") is False and router.allow_migrate("default", "agents") is None
    scope = whole_tenant(world.a)
    with replicas.reading(scope) as alias:
        assert alias == "replica"
        corpus = type(world.shared).objects.for_scope(scope).get(pk=world.shared.pk)  # read on the replica
        assert corpus._state.db == "replica"
    assert router.db_for_write(type(corpus), instance=corpus) == "default"
    with activate(scope):  # saved on the primary (a write on the standby would fail: read-only)
        corpus.description = "changed on the primary"
        corpus.save()
    replica.wait_for_replay()
    with replicas.reading(scope, alias="replica"):
        assert type(world.shared).objects.for_scope(scope).get(pk=world.shared.pk).description == "changed on the primary"


def test_inside_a_transaction_on_the_primary_reads_stay_there(world):
    scope = whole_tenant(world.a)
    assert replicas.read_alias(scope) == "replica"
    with activate(scope):
        assert replicas.read_alias(scope) == "default"


def _ask(client, question: str) -> dict:
    r = client.post("/api/v1/ask/", {"question": question}, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def test_a_lagging_replica_never_serves_a_run_that_is_not_there_yet(world, replica, settings):
    admin, auditor, reader = world.client("a-admin"), world.client("a-auditor"), world.client("a-reader")
    test_db = connections["default"].settings_dict["NAME"]
    replica.wait_for_replay()
    replica.synchronous = False
    replica.pause_replay()
    try:
        first = replica.statements
        run = _ask(admin, "What is the hotel limit per night?")  # its search may use the replica; the run is stored on the primary
        # The standby has not replayed it (read as its superuser: no row-level security in the way).
        assert replica.sql("SELECT count(*) FROM agents_run WHERE tenant_id = %s AND id = %s", (world.a.id, run["id"]),
                           dbname=test_db) == [(0,)]

        # The asker reads its own write: pinned to the primary until the replica has replayed it.
        assert replicas.read_alias(whole_tenant(world.a)) == "replica"  # another principal's reads still go there
        detail = admin.get(f"/api/v1/runs/{run['id']}/")
        assert detail.status_code == 200 and detail.json()["hash"] == run["hash"]
        assert [r["id"] for r in admin.get("/api/v1/runs/").json()["results"]] == [run["id"]]
        settings.REPLICA_PIN_SECONDS = 0  # without the pin the same list comes from the replica, without the run
        assert admin.get("/api/v1/runs/").json()["results"] == []
        settings.REPLICA_PIN_SECONDS = 60

        # Another principal, not pinned: the replica is asked first, misses the run, and the primary answers.
        with replicas.reading(whole_tenant(world.a), alias="replica"), pytest.raises(NotVisible):
            access_run(whole_tenant(world.a), run["id"])  # the replica alone would answer 404
        seen = replica.statements
        detail = auditor.get(f"/api/v1/runs/{run['id']}/")
        assert detail.status_code == 200 and detail.json()["hash"] == run["hash"]
        assert replica.statements > seen
        # Its list is the replica's: bounded staleness (REPLICA_MAX_LAG_SECONDS), not a missing-run error.
        assert auditor.get("/api/v1/runs/").status_code == 200

        # Search on the paused replica still works.
        seen = replica.statements
        r = reader.post("/api/v1/search/", {"query": "hotel per night", "k": 5, "mode": "hybrid"}, format="json")
        assert r.status_code == 200 and "150 EUR" in r.json()["hits"][0]["text"] and CANARY not in r.content.decode()
        assert replica.statements > seen > first
    finally:
        replica.resume_replay()
        replica.synchronous = True
    replica.wait_for_replay()
    replicas.reset()
    listed = auditor.get("/api/v1/runs/").json()["results"]  # from the replica, which has it now
    assert [r["id"] for r in listed] == [run["id"]]
    with activate(whole_tenant(world.a)):
        assert Run.objects.for_scope(whole_tenant(world.a)).filter(id=run["id"]).exists()


def test_a_replica_past_the_lag_bound_serves_no_reads(world, replica, settings):
    scope = whole_tenant(world.a)
    replica.wait_for_replay()
    replica.synchronous = False
    replica.pause_replay()
    try:
        _ask(world.client("a-reader"), "Who rotates weekly?")  # WAL the paused standby receives but does not replay
        settings.REPLICA_MAX_LAG_SECONDS = 1
        time.sleep(1.2)
        replicas.reset()
        assert replicas.replica_lag() > 1 and replicas.read_alias(scope) == "default"
        settings.REPLICA_MAX_LAG_SECONDS = 0  # no bound
        replicas.reset()
        assert replicas.read_alias(scope) == "replica"
    finally:
        replica.resume_replay()
        replica.synchronous = True


def test_reads_the_replica_fails_under_are_answered_by_the_primary(world, replica):
    scope = whole_tenant(world.a)
    run = _ask(world.client("a-admin"), "What is the hotel limit per night?")
    replica.wait_for_replay()
    settings_dict = connections["replica"].settings_dict
    host = settings_dict["HOST"]

    def replica_goes_away() -> None:
        """The replica was reachable and current (trusted for a second); now its connection leads to a
        socket nothing listens on."""
        replicas.reset()
        assert replicas.read_alias(scope) == "replica"
        connections["replica"].close()
        settings_dict["HOST"] = f"{host}-gone"

    try:
        replica_goes_away()
        result = search(scope, "hotel per night", k=3, mode="keyword")
        assert "150 EUR" in result.hits[0].text
        assert replicas.read_alias(scope) == "default"  # this process reads the primary for a while
        replicas.reset()
        assert replicas.replica_lag() is None and replicas.read_alias(scope) == "default"  # looked again: still gone
        settings_dict["HOST"] = host

        replica_goes_away()
        detail = world.client("a-auditor").get(f"/api/v1/runs/{run['id']}/")
        assert detail.status_code == 200 and detail.json()["hash"] == run["hash"]
        assert replicas.read_alias(scope) == "default"
    finally:
        connections["replica"].close()
        settings_dict["HOST"] = host
        replicas.reset()
    assert replicas.read_alias(scope) == "replica"
