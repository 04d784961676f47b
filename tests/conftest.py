"""Shared fixtures. Tests run on the real embedded PostgreSQL + pgvector (or DATABASE_URL)."""

from __future__ import annotations

import os

import pytest

from kb.project.config import get_str

os.environ.setdefault("GROUNDED_EMBEDDER", "hash")

pytest_plugins = ["tests.factories"]


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _hash_embedder_by_default():
    """pytest-django imports settings before this file runs, so the setdefault above comes too late
    for settings.DEFAULT_EMBEDDER: apply it here (tests never load torch unless they ask for MiniLM)."""
    from django.conf import settings

    settings.DEFAULT_EMBEDDER = get_str("GROUNDED_EMBEDDER")


@pytest.fixture(autouse=True, scope="session")
def _eager_celery_by_default():
    """Jobs run in the test process after commit (CELERY_TASK_ALWAYS_EAGER, on here unless the
    environment says 0) unless a test sends them to a real worker (tests/kb/test_ingest_worker.py).
    In this process only: worker, gunicorn and soak subprocesses keep their own settings."""
    from django.conf import settings

    from kb.project.celery import app

    eager = os.environ.get("CELERY_TASK_ALWAYS_EAGER", "1").lower() in {"1", "true", "yes", "on"}
    settings.CELERY_TASK_ALWAYS_EAGER = eager
    app.conf.task_always_eager = eager


@pytest.fixture(autouse=True)
def _no_network_models(monkeypatch):
    """Tests never reach a real model API."""
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """Create and migrate the test database as the owner role; tests then use the app role.

    Django's own test-database setup would create it through the 'default' alias, which is the
    application role and (rightly) may not create databases or tables.
    """
    from django.core.management import call_command
    from django.db import connections

    name = connections["owner"].settings_dict["TEST"]["NAME"]
    with django_db_blocker.unblock():
        owner = connections["owner"]
        with owner._nodb_cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{name}"')
        for alias in ("owner", "default"):
            connections[alias].close()
            connections[alias].settings_dict["NAME"] = name
        os.environ["GROUNDED_DB_NAME"] = name  # for worker subprocesses started by tests
        call_command("migrate", database="owner", verbosity=0)
    yield
    with django_db_blocker.unblock():
        for alias in ("owner", "default"):
            connections[alias].close()
        with connections["owner"]._nodb_cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
