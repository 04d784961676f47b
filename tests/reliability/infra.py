"""Processes the slow reliability tests start: Celery workers, a private redis-server, gunicorn.

Everything started here is stopped by the same fixture that started it, by pid. The shared Redis
(127.0.0.1:6379) is only used on DB 6 and private queue names; a Redis that gets restarted is our own
on another port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

from tests.celery_pools import reset_celery_pools

ROOT = Path(__file__).resolve().parents[2]
SHARED_REDIS = os.environ.get("GROUNDED_RELIABILITY_REDIS_URL", "redis://127.0.0.1:6379/6")


def wait_for(condition: Callable[[], bool], timeout: float, what: str, logs: list[Path] = ()) -> None:  # type: ignore[assignment]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tail = "\n".join(p.read_text(errors="replace")[-2500:] for p in logs if p.exists())
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    """A redis-server of our own, without persistence, that a test may restart at will."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port, self.workdir = port, workdir
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1",
                                      "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        wait_for(self.ping, 10, f"redis-server on port {self.port}")

    def ping(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)  # a crash: nothing saved, no clean shutdown
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self, down_for: float = 1.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()


class Workers:
    """Celery worker subprocesses (solo pool) on one broker and queue."""

    def __init__(self, broker_url: str, queue: str, logdir: Path) -> None:
        self.broker_url, self.queue, self.logdir = broker_url, queue, logdir
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def start(self, **extra_env: str) -> subprocess.Popen:
        log = self.logdir / f"worker-{len(self.procs)}.log"
        env = {**os.environ, "REDIS_URL": self.broker_url, "CELERY_QUEUE": self.queue, "GROUNDED_EMBEDDER": "hash",
               "GROUNDED_EMBEDDER_PLUGINS": "tests.fakes.embedders", "PYTHONPATH": str(ROOT),
               "GROUNDED_TEST_REDIS_URL": SHARED_REDIS, "RATE_LIMIT_REDIS_URL": SHARED_REDIS, **extra_env}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "api.project", "worker", "--pool=solo", "-Q", self.queue, "-l", "info",
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"{self.queue}-{len(self.procs)}@%h"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        self.logs.append(log)
        wait_for(lambda: b" ready." in log.read_bytes() or proc.poll() is not None, 90, "the worker to start", [log])
        if proc.poll() is not None:
            raise AssertionError(f"worker exited:\n{log.read_text()[-3000:]}")
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def point_celery_at(broker_url: str, queue: str) -> dict:
    """Send this process's tasks to `broker_url`/`queue` (not eagerly); returns the settings to restore."""
    from api.project.celery import app

    keys = ("task_always_eager", "broker_url", "task_default_queue")
    saved = {k: app.conf[k] for k in keys}
    app.conf.update(task_always_eager=False, broker_url=broker_url, task_default_queue=queue)
    reset_celery_pools()
    return saved


def restore_celery(saved: dict) -> None:
    from api.project.celery import app

    app.conf.update(saved)
    reset_celery_pools()


def new_queue() -> str:
    return f"grounded-rel-{uuid.uuid4().hex[:10]}"


def api_tenant_with_fast_gemini(settings, monkeypatch, **provider_kwargs):
    """A tenant with the policy corpus and a reader key, rate limits out of the way, and the Gemini
    provider built without retry back-off (plus `provider_kwargs`). Returns (tenant, raw key)."""
    from django.core.cache import cache

    from agents.providers.gemini import GeminiProvider
    from tenants.models import ApiKey
    from tests.agents.conftest import make_policy_corpus
    from tests.factories import make_tenant

    settings.RATE_LIMIT_REDIS_URL = ""
    settings.RATE_LIMIT_PER_MINUTE = 100_000
    cache.clear()
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    _, raw = ApiKey.issue(tenant=tenant, name="reader", role="reader", all_departments=True)
    original = GeminiProvider.from_settings.__func__
    monkeypatch.setattr(GeminiProvider, "from_settings",
                        classmethod(lambda cls, **kw: original(cls, backoff_s=0, **provider_kwargs, **kw)))
    return tenant, raw
