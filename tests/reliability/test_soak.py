"""Soak (slow): bench/soak.py against a real gunicorn and Celery worker, bounded in time and requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_soak_mixed_traffic_has_no_errors_no_drift_and_bounded_memory(tmp_path, reliability):
    """Soak: mixed ask / search / upload traffic on gunicorn + Celery worker (bench/soak.py)"""
    seconds = os.environ.get("GROUNDED_SOAK_SECONDS", "60")
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", seconds, "--json", str(out),
                           "--logdir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    reliability.tried(r["requests"], "requests")
    reliability.tried(r["upload_jobs"]["uploaded"], "uploads ingested by the worker")
    reliability.figure("served / errors", f"{r['served_ok']} / {r['errors']} in {r['duration_s']} s ({r['throughput_rps']} req/s)")
    reliability.figure("p99 first -> last window (ms)", f"{r['p99_first_window_ms']} -> {r['p99_last_window_ms']}")
    reliability.figure("p50 / p99 by kind (ms)", {k: f"{v['p50_ms']} / {v['p99_ms']} (n={v['n']})" for k, v in r["by_kind"].items()})
    reliability.figure("RSS start -> end (MiB)", {k: f"{r['rss_mb_start'][k]} -> {r['rss_mb_end'][k]}" for k in r["rss_mb_start"]})
    reliability.figure("upload jobs", r["upload_jobs"])
    assert r["errors"] == 0, r["error_examples"]
    assert r["server_alive"] and r["worker_alive"]
    assert r["upload_jobs"]["ready"] == r["upload_jobs"]["uploaded"]
    first, last = r["p99_first_window_ms"], r["p99_last_window_ms"]
    assert last <= max(3 * first, first + 1000), f"p99 drifted from {first} to {last} ms"
    for kind, start in r["rss_mb_start"].items():
        assert r["rss_mb_end"][kind] <= start * 1.5 + 100, f"{kind} memory grew from {start} to {r['rss_mb_end'][kind]} MiB"
