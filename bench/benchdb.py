"""A throwaway database for a benchmark: created and migrated as owner, used by both aliases, dropped after."""

from __future__ import annotations


def create_database(dbname: str) -> None:
    """Set up Django, (re)create `dbname` and migrate it; both aliases point at it afterwards."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{dbname}"')
    for alias in ("owner", "default"):
        connections[alias].close()
        connections[alias].settings_dict["NAME"] = dbname
    call_command("migrate", database="owner", verbosity=0)


def drop_database(dbname: str) -> None:
    from django.db import connections

    from kb.retrieval.retrieve import close_side_connections

    for alias in ("owner", "default"):
        connections[alias].close()
    # Hybrid searches' side connections (worker threads, each with its own connection) would
    # point at the dropped database: a fresh pool connects anew for the next one.
    close_side_connections()
    with connections["owner"]._nodb_cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
