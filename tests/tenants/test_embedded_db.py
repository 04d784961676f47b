"""The embedded server: a holder killed with SIGKILL leaves postgres running; start-up stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kb.embedded import postgres

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import os, sys, time
os.environ["GROUNDED_DATA_DIR"] = sys.argv[1]
from kb.embedded.postgres import ensure_server
ensure_server()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def data_dir(tmp_path_factory):
    # Unix socket paths are short: keep the directory near the root.
    path = Path("/tmp") / f"gr-pg-{os.getpid()}"  # noqa: S108  (a short path for the server's Unix socket; unique per process)
    yield path
    postgres.stop_server(path)
    subprocess.run(["rm", "-rf", str(path)], check=False)


def test_sigkilled_holder_leaves_a_stale_server_that_startup_stops(data_dir):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    pid = postgres._postmaster_pid(data_dir)
    assert pid and psutil.pid_exists(pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)
    assert psutil.pid_exists(pid), "postgres outlives a SIGKILLed holder (the case being handled)"
    stopped = postgres.stop_stale_server(data_dir)
    assert stopped == pid
    assert not psutil.pid_exists(pid)


def test_server_stops_when_its_last_holder_exits_normally(data_dir):
    code = HOLDER.replace("time.sleep(600)", "")
    out = subprocess.run([sys.executable, "-c", code, str(data_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "ready" in out.stdout
    pid = postgres._postmaster_pid(data_dir)
    assert pid is None or not psutil.pid_exists(pid)


def test_live_holder_is_not_treated_as_stale(data_dir):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert postgres.stop_stale_server(data_dir) is None
        assert psutil.pid_exists(postgres._postmaster_pid(data_dir))
    finally:
        proc.terminate()
        proc.wait()


QUERIER = """
import os, sys
os.environ["GROUNDED_DATA_DIR"] = sys.argv[1]
import psycopg
from kb.embedded.postgres import ensure_server
for line in sys.stdin:  # one query per line read, each on a new connection (CONN_MAX_AGE 0, as the web workers)
    with psycopg.connect(host=ensure_server(), user="postgres", dbname="postgres") as conn:
        answer = conn.execute("SELECT 41 + 1").fetchone()[0]
    print("answer", answer, flush=True)  # once the connection is closed: the test stops the server on reading it
"""


def test_a_stopped_server_is_started_again_by_the_next_connection(data_dir):
    """Issue 29: after the embedded PostgreSQL stops, a running process reconnects on its next request
    instead of failing until it is restarted."""
    proc = subprocess.Popen([sys.executable, "-c", QUERIER, str(data_dir)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "answer 42"
        first = postgres._postmaster_pid(data_dir)
        assert postgres.stop_server(data_dir) == first and not psutil.pid_exists(first)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "answer 42"
        again = postgres._postmaster_pid(data_dir)
        assert again and again != first and psutil.pid_exists(again)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
