"""Shared fixtures. Tests run on the real embedded PostgreSQL + pgvector (or DATABASE_URL)."""

from __future__ import annotations

import gc
import logging
import os
from collections import Counter

import pytest
from django.conf import settings

from kb.embedded.postgres import ensure_server
from tenants.conf.environment import get_str
from tests import databases, query_checker
from tests.logs import every_log_record

os.environ.setdefault("GROUNDED_EMBEDDER", "hash")
# The word-overlap judge unless a test asks for the cross-encoder (tests/kb/test_relevance.py, tests/api/test_answer_quality.py).
os.environ.setdefault("GROUNDED_RELEVANCE_MODEL", "none")
# Every run answers afresh unless a test turns the answer cache on for its tenant (tests/agents/test_answer_cache.py):
# a test asking one question twice means two runs.
os.environ.setdefault("ANSWER_CACHE_TTL_SECONDS", "0")
# Under pytest-xdist each worker gets Redis databases of its own (tests/databases.py); set before any
# test module reads these URLs at import time. Real-worker subprocesses inherit them.
if databases.xdist_worker():
    for _url_setting in ("GROUNDED_TEST_REDIS_URL", "GROUNDED_RELIABILITY_REDIS_URL"):
        os.environ[_url_setting] = databases.redis_url_for_worker(get_str(_url_setting), databases.xdist_worker())
    # torch's OpenMP threads sleep while they wait for each other instead of spinning: with more workers
    # than cores a spinning thread burns the time slice its partner needs (the quality gate took ~2x
    # its quiet time). Each keeps every core: a test that runs alone at the end still uses them all.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

pytest_plugins = ["tests.factories", "tests.standby"]  # standby: the read-replica tests' streaming standby


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")
    parser.addoption("--tenant-sql-log", default=None,
                     help="survey: append tenant query checker violations to this file instead of failing")


def pytest_configure(config):
    """With xdist workers, start the embedded server in the controller before they spawn: workers
    starting a fresh server together would race to initialise it."""
    if config.getoption("dist", "no") != "no" and not databases.xdist_worker() and settings.EMBEDDED_DATABASE:
        ensure_server()


def pytest_sessionstart(session):
    """Test processes collect garbage less often: with CPython's default gen-0 threshold (700
    allocations) the collector ran every few statements. A test process holds no cycles worth
    collecting sooner. (With `pytest_collection_finish`: about 8 % less CPU in the API tests.)"""
    gc.set_threshold(50_000, 50, 100)


def pytest_collection_finish(session):
    """What is alive once the tests are collected (Django, the test modules, their generated cases)
    lives to the end: moved out of the collector's reach, so collections stop rescanning it."""
    gc.collect()
    gc.freeze()


def pytest_ignore_collect(collection_path, config):
    """The serial phase imports only the test files that mark tests `serial` (collecting every file
    costs ~12 s: the API fuzz test generates its cases at collection)."""
    if get_str("GROUNDED_TEST_PHASE") == "serial" and collection_path.suffix == ".py" \
            and collection_path.name.startswith("test_"):
        return "mark.serial" not in collection_path.read_text(encoding="utf-8")
    return None


# Fixtures that reach the test database: a test using one (or marked django_db) is a `db` test.
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback",
                     "live_server", "django_db_setup"}


def distinct_node_ids(items) -> None:
    """Give each test its own node id. pytest 9 builds an item's id from its function name and
    parametrize ids, and Schemathesis names its per-operation items ("test_api_fuzz[POST
    /api/v1/ask/]") outside parametrize, so all 46 shared one id; pytest-xdist schedules by id and
    ran only the first of them. Such an item's id becomes its parent's id and its full name (pytest
    has no public setter for it)."""
    counts = Counter(item.nodeid for item in items)
    for item in items:
        if counts[item.nodeid] > 1 and item.name != item.originalname:
            item._id = type(item.id).parse(f"{item.parent.nodeid}::{item.name}")
    if len({item.nodeid for item in items}) != len(items):
        raise pytest.UsageError("two collected tests share a node id; pytest-xdist would run only one of them")


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs the database `db` (`pytest -m "not db"`: the pure tests alone,
    which pytest-django would stop from touching it), skip `slow` tests without --runslow, and with
    GROUNDED_TEST_PHASE keep the `serial` tests only ("serial") or all the others ("parallel")."""
    phase = get_str("GROUNDED_TEST_PHASE")  # scripts/test: "parallel", then "serial"
    if phase:
        keep = [item for item in items if (item.get_closest_marker("serial") is not None) == (phase == "serial")]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    distinct_node_ids(items)
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    # The quality gate is the longest test by far: first, so a parallel run does not end waiting for it alone.
    items.sort(key=lambda item: item.get_closest_marker("quality_gate") is None)
    for item in items:
        if item.get_closest_marker("django_db") or DATABASE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.db)
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _hash_embedder_by_default():
    """pytest-django imports settings before this file runs, so the setdefault above comes too late
    for settings.DEFAULT_EMBEDDER: apply it here (tests never load torch unless they ask for MiniLM)."""
    settings.DEFAULT_EMBEDDER = get_str("GROUNDED_EMBEDDER")


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """Passwords hashed with one MD5 round in tests (Django's advice for test settings): the production
    hasher (PBKDF2, a million rounds) costs about 0.4 s per staff user and per sign-in on a slow machine.
    In this process only: servers started as subprocesses keep the production hashers."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True, scope="session")
def _eager_celery_by_default():
    """Jobs run in the test process after commit (CELERY_TASK_ALWAYS_EAGER, on here unless the
    environment says 0) unless a test sends them to a real worker (tests/kb/test_ingest_worker.py).
    In this process only: worker, gunicorn and soak subprocesses keep their own settings."""
    from api.project.celery import app

    eager = os.environ.get("CELERY_TASK_ALWAYS_EAGER", "1").lower() in {"1", "true", "yes", "on"}
    settings.CELERY_TASK_ALWAYS_EAGER = eager
    app.conf.task_always_eager = eager


@pytest.fixture(autouse=True, scope="session")
def _tenant_query_checker(pytestconfig):
    """Every statement of the session on a tenant table carries a tenant_id term for it, or the
    statement raises (tests/query_checker.py; exemptions there)."""
    from django.apps import apps

    query_checker.RECORD["path"] = pytestconfig.getoption("--tenant-sql-log")
    query_checker.install(query_checker.tenant_tables_of(apps.get_models(include_auto_created=True)))


@pytest.fixture(autouse=True)
def _tenantless_sql_marker(request):
    """`@pytest.mark.tenantless_sql("why")`: the test issues tenant-less SQL on purpose (adversarial RLS
    tests); the query checker lets it through."""
    marker = request.node.get_closest_marker("tenantless_sql")
    if marker is None:
        yield
        return
    with query_checker.allowed(str(marker.args[0]) if marker.args else request.node.nodeid):
        yield


@pytest.fixture(autouse=True)
def _no_network_models(monkeypatch):
    """Tests never reach a real model API."""
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """This worker's test database, copied from the migrated template (tests/databases.py) as the
    owner role; tests then use the app role.

    Django's own test-database setup would create it through the 'default' alias, which is the
    application role and (rightly) may not create databases or tables. `migrate` runs once more on
    the copy: nothing is left to apply, but its post_migrate hooks grant the application role its
    rights on this database by name, exactly as on a database migrated from nothing.
    """
    from django.core.management import call_command
    from django.db import connections

    def use(name: str) -> None:
        # A replica configured by DATABASE_REPLICA_URL reads this database too (its standby's copy of it).
        for alias in ("owner", "default", *(["replica"] if "replica" in connections.settings else [])):
            connections[alias].close()
            connections[alias].settings_dict["NAME"] = name

    def migrate(name: str) -> None:
        use(name)
        call_command("migrate", database="owner", verbosity=0)
        use(name)  # closes the connections: the template must have none when it is renamed and copied

    base = connections["owner"].settings_dict["TEST"]["NAME"]
    name = databases.worker_database_name(base, databases.xdist_worker())
    with django_db_blocker.unblock():
        databases.create_from_template(name, base, migrate)
        os.environ["GROUNDED_DB_NAME"] = name  # for worker subprocesses started by tests
        migrate(name)
    yield
    with django_db_blocker.unblock():
        for alias in ("owner", "default"):
            connections[alias].close()
        with connections["owner"]._nodb_cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def log_records():
    """The log records of every logger, at every level, while the test runs. Unlike pytest's `caplog` it
    works with pytest's logging plugin off (`scripts/reliability` runs `-p no:logging`)."""
    records: list[logging.LogRecord] = []
    with every_log_record(records.append):
        yield records
