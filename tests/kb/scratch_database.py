"""A new, empty database on the owner's server for migration tests, and migrating it to a state."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor


@pytest.fixture
def scratch_alias(django_db_blocker) -> Iterator[str]:
    """A connection alias to a new, empty database on the owner's server, dropped afterwards."""
    owner = connections["owner"]
    name = f"{owner.settings_dict['NAME']}_scratch_{uuid.uuid4().hex[:8]}"
    alias = f"scratch_{uuid.uuid4().hex[:8]}"
    with django_db_blocker.unblock():
        with owner._nodb_cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        connections.settings[alias] = {**owner.settings_dict, "NAME": name}
        try:
            yield alias
        finally:
            connections[alias].close()
            del connections[alias]
            del connections.settings[alias]
            with owner._nodb_cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_to(alias: str, target: tuple[str, str]):
    """Migrate `alias` to `target` (and what it depends on); the historical apps at that state."""
    executor = MigrationExecutor(connections[alias])
    executor.migrate([target])
    executor.loader.build_graph()
    return executor.loader.project_state([target]).apps
