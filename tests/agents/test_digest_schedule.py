"""Chain digests on a schedule (issue 47, finding 9): Celery beat's entry runs every CHAIN_DIGEST_INTERVAL_S
(default 300 s), the loop of a run without beat (`write_chain_digests --loop`) writes a digest each period
for a tenant whose chain moved (and none for one whose did not), and a run deleted after a scheduled
digest is caught by `verify_chain --digests`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections

from agents.digests import digest_loop
from agents.tasks import write_chain_digests
from api.project.celery import app
from tenants.conf.environment import DECLARED
from tests.agents.conftest import make_policy_corpus
from tests.agents.test_chain_digests import _owner, _runs, _verify, signing  # noqa: F401  (the signing key fixture)
from tests.factories import make_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"], transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def test_beat_writes_digests_every_chain_digest_interval(settings):
    entry = app.conf.beat_schedule["write-chain-digests"]
    assert entry["task"] == "agents.write_chain_digests" and entry["task"] in app.tasks
    assert entry["schedule"] == float(settings.CHAIN_DIGEST_INTERVAL_S)
    assert next(s for s in DECLARED if s.name == "CHAIN_DIGEST_INTERVAL_S").default == 300  # minutes, not an hour
    # The period comes from the setting.
    code = "from api.project.celery import app; print(app.conf.beat_schedule['write-chain-digests']['schedule'])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "CHAIN_DIGEST_INTERVAL_S": "42"},
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "42.0"


def test_the_beat_task_writes_only_for_a_chain_that_moved(signing):  # noqa: F811
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    _runs(tenant, 1)
    assert len(write_chain_digests()) >= 1  # every tenant without a digest gets one
    assert write_chain_digests() == []  # nothing moved
    _runs(tenant, 1)
    assert [Path(p).parent.name for p in write_chain_digests()] == [str(tenant.id)]


def test_the_loop_writes_a_digest_each_period_and_a_later_deletion_is_detected(signing):  # noqa: F811
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    _runs(tenant, 2)
    rounds: list[list[Path]] = []
    stop = threading.Event()

    def loop() -> None:
        try:
            digest_loop(0.3, stop, on_round=rounds.append)
        finally:
            connections.close_all()

    def wait_rounds(n: int) -> None:
        deadline = time.monotonic() + 30
        while len(rounds) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(rounds) >= n, rounds

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        wait_rounds(1)  # at once, not after a period
        mine = signing / str(tenant.id)
        assert [p.name[:12] for p in sorted(mine.glob("*.json"))] == ["000000000002"]
        runs = _runs(tenant, 2)  # seq 3 and 4
        seen = len(rounds)
        wait_rounds(seen + 2)  # a round that started after the runs were committed
        assert [p.name[:12] for p in sorted(mine.glob("*.json"))] == ["000000000002", "000000000004"]
        wait_rounds(len(rounds) + 2)
        assert len(list(mine.glob("*.json"))) == 2  # nothing moved: no new file
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert _verify(tenant, signing)[0]
    # The newest run deleted after the scheduled digest (bypassing the append-only triggers, as an owner could).
    _owner("DELETE FROM agents_citation WHERE run_id = %s; DELETE FROM agents_runstep WHERE run_id = %s; "
           "DELETE FROM agents_run WHERE id = %s", [runs[-1].id] * 3)
    ok, out = _verify(tenant, signing)
    assert not ok and "run seq 4 signed at" in out and "is gone" in out, out


def test_write_chain_digests_changed_only_from_the_command(signing):  # noqa: F811
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    _runs(tenant, 1)
    first, again = io.StringIO(), io.StringIO()
    call_command("write_chain_digests", changed_only=True, stdout=first)
    call_command("write_chain_digests", changed_only=True, stdout=again)
    assert f"/{tenant.id}/000000000001-" in first.getvalue() and again.getvalue() == ""
