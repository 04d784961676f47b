"""The default run, for real: `scripts/run` (no DATABASE_URL, no REDIS_URL) started in a temporary
folder, as a user starts it: embedded PostgreSQL, embedded Redis, a Celery worker with beat, gunicorn.

`DefaultRun.start()` returns once /healthz answers 200, with an admin API key of the demo tenant and
an empty corpus of its own (default embedding model). `stop()` stops it as Ctrl-C does (SIGTERM to
scripts/run), then anything still running from its folder (found by GROUNDED_DATA_DIR in the
process's environment, so only what this run started), then removes the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psutil
import psycopg

from tests.reliability.infra import ROOT, free_port, wait_for

# Variables that would take the run out of its default shape (external services, eager jobs, the test
# suite's database and fake embedder); scripts/run must see none of them.
_DROP_PREFIXES = ("GROUNDED_", "DATABASE_", "REDIS_", "CELERY_", "RATE_LIMIT_", "PYTEST", "CHAIN_", "SECRET_KEY")
_DROP = {"DEBUG", "DJANGO_SETTINGS_MODULE", "GEMINI_API_KEY", "OPENAI_COMPAT_BASE_URL", "WEB_CONCURRENCY", "PORT"}

KEY_SCRIPT = """
from tenants.models import ApiKey, Tenant
tenant = Tenant.objects.using("owner").get(slug="kestrel")
_, raw = ApiKey.issue(tenant=tenant, name="self-healing check", role="admin", all_departments=True, using="owner")
print("KEY", raw)
"""


class DefaultRun:
    """One `scripts/run` in a folder of its own under /tmp (short: unix socket paths are limited)."""

    def __init__(self, logdir: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gr-run-", dir="/tmp"))
        self.data_dir = self.folder / "pg"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = logdir / "run.log"  # kept after stop()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_PREFIXES) and k not in _DROP}
        # The checks poll jobs over the API: the per-key rate limit (120 a minute) would answer 429.
        self.env.update(GROUNDED_DATA_DIR=str(self.data_dir), PORT=str(self.port), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                        PYTHONUNBUFFERED="1", RATE_LIMIT_PER_MINUTE="1000000")
        self.proc: subprocess.Popen | None = None
        self.key = ""
        self.corpus_id = 0

    # --- life cycle ---------------------------------------------------------------------------------

    def start(self, timeout: float = 420) -> DefaultRun:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(ROOT / "scripts" / "run")], cwd=ROOT, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: self.healthy() or self.proc.poll() is not None, timeout, "scripts/run to serve", [self.log])
        assert self.proc.poll() is None, f"scripts/run exited:\n{self.output()[-4000:]}"
        out = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "manage.py", "shell", "-c", KEY_SCRIPT], cwd=ROOT,
                             env=self.env, capture_output=True, text=True, timeout=120)
        keys = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("KEY ")]
        assert keys, out.stdout[-2000:] + out.stderr[-2000:]
        self.key = keys[0]
        response = self.api("POST", "/api/v1/corpora/", json={"name": f"self-healing {uuid.uuid4().hex[:6]}"})
        assert response.status_code == 201, response.text
        self.corpus_id = response.json()["id"]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # what Ctrl-C does: scripts/run stops what it started
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for proc in self._leftovers():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _leftovers(self) -> list[psutil.Process]:
        """Processes still running with this run's data dir in their environment (or postgres on it)."""
        mine = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if proc.pid == os.getpid():
                    continue
                if (proc.environ().get("GROUNDED_DATA_DIR") == str(self.data_dir)
                        or str(self.data_dir) in " ".join(proc.info["cmdline"] or [])):
                    mine.append(proc)
            except psutil.Error:
                continue
        return mine

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    # --- HTTP ---------------------------------------------------------------------------------------

    def healthz(self) -> tuple[int, dict]:
        """(status, body) of GET /healthz on a new connection; (0, {}) when nothing answers."""
        try:
            r = httpx.get(self.base + "/healthz", timeout=10)
        except httpx.HTTPError:
            return 0, {}
        try:
            return r.status_code, r.json()
        except json.JSONDecodeError:
            return r.status_code, {}

    def healthy(self) -> bool:
        return self.healthz()[0] == 200

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        return httpx.request(method, self.base + path, headers={"Authorization": f"Bearer {self.key}"}, timeout=60, **kwargs)

    def upload(self, name: str, data: bytes) -> int:
        """Upload one file to the run's corpus; returns its job id (202 at once)."""
        r = self.api("POST", "/api/v1/documents/", data={"corpus": str(self.corpus_id)}, files={"files": (name, data, "text/markdown")})
        assert r.status_code == 202, r.text
        return r.json()["jobs"][0]

    def job(self, job_id: int) -> dict:
        r = self.api("GET", f"/api/v1/jobs/{job_id}/")
        assert r.status_code == 200, r.text
        return r.json()

    # --- processes ----------------------------------------------------------------------------------

    def worker(self) -> psutil.Process | None:
        """The Celery worker's main process (a child of scripts/run), if one is running."""
        for child in psutil.Process(self.proc.pid).children():
            try:
                cmd = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "celery" in cmd and " worker" in cmd:
                return child
        return None

    def web(self) -> psutil.Process:
        """gunicorn's arbiter (a child of scripts/run)."""
        for child in psutil.Process(self.proc.pid).children():
            if "gunicorn" in " ".join(child.cmdline()):
                return child
        raise AssertionError("no gunicorn under scripts/run")

    def postmaster(self) -> psutil.Process | None:
        """The embedded PostgreSQL's postmaster, if running."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
            proc = psutil.Process(pid)
            return proc if proc.status() != psutil.STATUS_ZOMBIE else None
        except (OSError, ValueError, IndexError, psutil.Error):
            return None

    def stop_postgres_immediately(self) -> int:
        """`pg_ctl stop -m immediate` on the embedded data dir, as the server's owner; returns the old pid."""
        proc = self.postmaster()
        assert proc is not None, "the embedded postgres is not running"
        pg_ctl = Path(proc.exe()).with_name("pg_ctl")
        user = proc.username()
        subprocess.run([str(pg_ctl), "-D", str(self.data_dir), "stop", "-m", "immediate"], check=True, cwd="/tmp",  # noqa: S108  (a cwd, nothing written)
                       user=None if user == psutil.Process().username() else user, capture_output=True, timeout=60)
        return proc.pid

    def sql(self, query: str, params: list | tuple = ()) -> list[tuple]:
        """A query as the embedded server's superuser (sees every tenant's rows), on a connection of its own."""
        with psycopg.connect(host=str(self.data_dir), user="postgres", dbname="grounded", autocommit=True, connect_timeout=10) as conn:
            return conn.execute(query, params).fetchall()


def wait_until(condition, timeout: float, what: str, run: DefaultRun, every: float = 0.0) -> float:
    """Poll `condition` (pausing `every` seconds more between calls) until true; returns the seconds it
    took; fails with the run's output after `timeout`."""
    started = time.monotonic()

    def paced() -> bool:
        done = condition()
        if not done and every:
            time.sleep(every)
        return done

    wait_for(paced, timeout, what, [run.log])
    return time.monotonic() - started
