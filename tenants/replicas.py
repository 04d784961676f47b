"""Read replicas: which database a read goes to, and the router that keeps writes on the primary.

With DATABASE_REPLICA_URL set, settings has a "replica" alias: a streaming standby of the primary,
connected as the application role (row-level security applies there as on "default"). Nothing is
sent there implicitly. A read goes to the replica only through a named entry point:

- `read_alias(scope)`: the alias a read for `scope` may use, "replica" or "default";
- `reading(scope)`: a block whose ORM reads (querysets without `.using`) go to that alias, with the
  scope activated on it (tenants.scope.activate: SET LOCAL in a read-only transaction, which a standby
  allows); it yields the alias, for raw SQL and functions that take `using`;
- `kb.retrieval.search(..., using=None)` asks `read_alias` itself.

`read_alias` answers "default" (the primary) when there is no replica; when the caller is inside a
transaction on "default" (it may have written what it is about to read, and a write transaction must
not read an older snapshot elsewhere); when the replica cannot be reached or is further behind than
REPLICA_MAX_LAG_SECONDS (checked at most once a second per process); and when the caller wrote
something the replica has not replayed yet. That last rule is reading your own writes: a service that
writes for a principal (a run stored, a document uploaded, feedback given) calls `note_write(scope)`,
which, after the commit, keeps the primary's WAL position in the cache (Redis in production, so every
web and worker process sees it) for REPLICA_PIN_SECONDS; until the replica has replayed past it, that
principal's reads go to the primary. The pin is per principal, not per tenant, so one busy writer
does not send its colleagues' reads to the primary. Reads by id that must not miss a row another
caller just wrote (a run id handed out by a stream) retry on the primary when the replica does not
have it (api.views.base.ScopedAPIView.read_one).

`ReplicaRouter` (DATABASE_ROUTERS): reads inside `reading` go to its alias; an object read from the
replica is saved to "default"; no migration runs on the replica. Without a replica it changes nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.core.cache import cache
from django.db import DatabaseError, OperationalError, connections, transaction

from tenants.conf import product_settings
from tenants.scope import Scope, activate

log = logging.getLogger(__name__)

PRIMARY = "default"
REPLICA = "replica"
LAG_CHECK_S = 1.0  # how long a process trusts its last look at the replica's lag
UNREACHABLE_RETRY_S = 5.0  # how long a process reads the primary after the replica failed to answer

# The alias ORM reads use inside `reading` (None outside: Django's default, "default").
_READ_ALIAS: contextvars.ContextVar[str | None] = contextvars.ContextVar("read_alias", default=None)

_state_lock = threading.Lock()
_state: dict[str, float] = {}  # "checked_at", "lag" (seconds; -1: unreachable)


def configured() -> bool:
    """Whether a replica alias exists (DATABASE_REPLICA_URL, or one a test added)."""
    return REPLICA in connections.settings


def reset() -> None:
    """Forget this process's last look at the replica (tests; after the replica was replaced)."""
    with _state_lock:
        _state.clear()


def replica_lag() -> float | None:
    """Seconds the replica is behind (0 when it streams and has replayed all it received; else the age of
    the last transaction it replayed), None when it cannot be reached; cached per process for
    LAG_CHECK_S (UNREACHABLE_RETRY_S after a failure)."""
    now = time.monotonic()
    with _state_lock:
        lag, checked = _state.get("lag"), _state.get("checked_at", -1e9)
    if lag is not None and now - checked < (LAG_CHECK_S if lag >= 0 else UNREACHABLE_RETRY_S):
        return lag if lag >= 0 else None
    try:
        with connections[REPLICA].cursor() as cur:
            # Not in recovery: the alias names a primary (a promoted standby): nothing to replay. Streaming
            # (a WAL receiver runs: its row, whose details only privileged roles see) with all it received
            # replayed: current. Otherwise: behind by the age of the last transaction it replayed.
            cur.execute("SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0 "
                        "WHEN EXISTS (SELECT 1 FROM pg_stat_wal_receiver) "
                        "AND pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 "
                        "ELSE coalesce(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0) END")
            lag = max(float(cur.fetchone()[0]), 0.0)
    except DatabaseError:
        log.warning("the read replica cannot be reached: reading the primary for %.0f s", UNREACHABLE_RETRY_S, exc_info=True)
        mark_unreachable()
        return None
    with _state_lock:
        _state.update(lag=lag, checked_at=now)
    return lag


def mark_unreachable() -> None:
    """A read on the replica failed (connection lost, a query cancelled by a conflict with its recovery):
    this process reads the primary for UNREACHABLE_RETRY_S, then looks again on a new connection."""
    connections[REPLICA].close()
    with _state_lock:
        _state.update(lag=-1.0, checked_at=time.monotonic())


def _pin_key(scope: Scope) -> str:
    principal = hashlib.blake2b(scope.principal.encode(), digest_size=12).hexdigest()
    return f"grounded:replica-pin:{scope.tenant_id}:{principal}"


def _replayed(lsn: str) -> bool:
    """Whether the replica has replayed the primary's WAL up to `lsn` (a pg_lsn's text)."""
    try:
        with connections[REPLICA].cursor() as cur:
            cur.execute("SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, true)", [lsn])
            return bool(cur.fetchone()[0])
    except DatabaseError:
        connections[REPLICA].close()
        return False


def read_alias(scope: Scope) -> str:
    """The alias a read for `scope` may use now: REPLICA, or PRIMARY (see the module's rules)."""
    if not configured() or connections[PRIMARY].in_atomic_block:
        return PRIMARY
    lag = replica_lag()
    limit = product_settings.REPLICA_MAX_LAG_SECONDS
    if lag is None or (limit and lag > limit):
        return PRIMARY
    pin = cache.get(_pin_key(scope)) if product_settings.REPLICA_PIN_SECONDS else None
    if pin is not None and not _replayed(pin):
        return PRIMARY
    return REPLICA


def note_write(scope: Scope) -> None:
    """`scope`'s principal wrote: once the surrounding transaction on "default" commits (at once
    outside one), its reads use the replica only after it has replayed the primary's WAL up to here.
    Does nothing without a replica."""
    if not configured() or not product_settings.REPLICA_PIN_SECONDS:
        return
    transaction.on_commit(lambda: _pin(scope), using=PRIMARY)


def _pin(scope: Scope) -> None:
    with connections[PRIMARY].cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        lsn = cur.fetchone()[0]
    cache.set(_pin_key(scope), lsn, timeout=product_settings.REPLICA_PIN_SECONDS)


@contextlib.contextmanager
def reading(scope: Scope, *, alias: str | None = None) -> Iterator[str]:
    """A read-only block for `scope` on `alias` (default: `read_alias(scope)`): the scope activated
    there, and ORM reads without `.using` routed there. Yields the alias. Writes inside the block go
    to "default", where the scope is not activated: they fail (row-level security), as they should."""
    alias = alias or read_alias(scope)
    token = _READ_ALIAS.set(alias)
    try:
        with activate(scope, using=alias):
            yield alias
    except OperationalError:
        if alias == REPLICA:
            mark_unreachable()  # the next reads of this process go to the primary
        raise
    finally:
        _READ_ALIAS.reset(token)


def current_read_alias() -> str:
    """The alias of the enclosing `reading` block; "default" outside one (for functions that take `using`)."""
    return _READ_ALIAS.get() or PRIMARY


class ReplicaRouter:
    """Django's database router: see the module docstring. Returns None (Django's own choice) for
    everything it does not decide."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return _READ_ALIAS.get()

    def db_for_write(self, model: type, **hints: Any) -> str | None:
        instance = hints.get("instance")
        if instance is not None and getattr(instance._state, "db", None) == REPLICA:
            return PRIMARY  # an object read on the replica is written on the primary
        return None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        if {obj1._state.db, obj2._state.db} <= {PRIMARY, REPLICA}:
            return True  # one database: the replica is a copy of the primary
        return None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        return False if db == REPLICA else None
