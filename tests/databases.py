"""The test databases: one per pytest-xdist worker, each a copy of a template migrated once.

Migrating from nothing takes most of a minute; copying a database takes about a second. The schema
is therefore migrated once into a template database named after a digest of everything that shapes
it (the migration files, the post-migrate grant hooks, Django's and pgvector's versions), and each
worker's database is created from it with `CREATE DATABASE ... TEMPLATE`. A template whose digest
no longer matches is never used again: the next build drops it. Building and copying happen under a
PostgreSQL advisory lock, so workers starting together build the template once and never copy it
while it is being written. All of it runs as the owner role; the application role is untouched.

Shared services are split per worker the same way: `redis_url_for_worker` gives each worker a Redis
database of its own, so queues, the `unacked` hash and rate-limit windows of parallel tests never meet.
"""

from __future__ import annotations

import hashlib
import os
from importlib.metadata import version
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
# Besides the migrations, the post_migrate hooks shape the schema: grants (tenants/rls.py) and the
# append-only revokes of the trace tables (agents/chain.py).
SCHEMA_SOURCES = ("tenants/rls.py", "agents/chain.py")
SCHEMA_PACKAGES = ("django", "pgvector")
# Any fixed 64-bit number: the key of the advisory lock that serialises template builds and copies.
TEMPLATE_LOCK = 0x67726F756E646564  # "grounded"
# Workers gw0, gw1, ... use Redis databases 8, 9, ...: clear of the DBs the suites use serially (2, 4, 6).
FIRST_WORKER_REDIS_DB = 8
REDIS_DATABASES = 16


def xdist_worker() -> str:
    """The pytest-xdist worker id ("gw0", "gw1", ...), or "" in a run without workers."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def worker_database_name(base: str, worker: str) -> str:
    """This worker's database: `base` itself without xdist, else `base_gw<n>`."""
    return f"{base}_{worker}" if worker else base


def schema_digest() -> str:
    """A digest of everything that decides what `migrate` builds; a new digest means a new template."""
    digest = hashlib.sha256()
    files = sorted(ROOT.glob("*/migrations/*.py")) + [ROOT / name for name in SCHEMA_SOURCES]
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    for package in SCHEMA_PACKAGES:
        digest.update(f"{package}=={version(package)}\0".encode())
    return digest.hexdigest()[:12]


def template_name(base: str) -> str:
    return f"{base}_tpl_{schema_digest()}"


def redis_url_for_worker(url: str, worker: str) -> str:
    """`url` on the Redis database of this xdist worker (unchanged without xdist)."""
    if not worker:
        return url
    db = FIRST_WORKER_REDIS_DB + int(worker.removeprefix("gw"))
    if db >= REDIS_DATABASES:
        raise RuntimeError(f"xdist worker {worker} has no Redis database of its own (DBs {FIRST_WORKER_REDIS_DB}-"
                           f"{REDIS_DATABASES - 1} serve workers gw0-gw{REDIS_DATABASES - 1 - FIRST_WORKER_REDIS_DB}): "
                           "use fewer workers")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def create_from_template(name: str, base: str, migrate) -> None:
    """Create database `name` as a copy of the current template of `base`, building the template first
    (with `migrate(database_name)`, which must leave no connection open to it) if it does not exist."""
    from django.db import connections

    template = template_name(base)
    owner = connections["owner"]
    with owner._nodb_cursor() as cur:
        cur.execute("SELECT current_database()")
        # Advisory locks are per database: one taken elsewhere (Django's fallback when "postgres" cannot
        # be reached) would not exclude the other workers.
        if (database := cur.fetchone()[0]) != "postgres":
            raise RuntimeError(f"the template lock needs the 'postgres' database, connected to {database!r}")
        cur.execute("SELECT pg_advisory_lock(%s)", [TEMPLATE_LOCK])
        try:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
            if cur.fetchone() is None:
                pattern = base.replace("_", r"\_") + r"\_tpl\_%"  # LIKE: "_" matches any character unescaped
                cur.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [pattern])
                for (stale,) in cur.fetchall():
                    cur.execute(f'DROP DATABASE "{stale}" WITH (FORCE)')
                building = f"{template}_new"
                cur.execute(f'CREATE DATABASE "{building}"')
                migrate(building)
                cur.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')  # complete, or absent
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", [TEMPLATE_LOCK])
