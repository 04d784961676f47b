"""Reliability suite fixtures: the canary world, and the results plugin behind docs/reliability.md.

Every test in tests/reliability is one row of the reliability table: its docstring's first line
names the check, `reliability.tried(n, what)` records what was tried and `reliability.figure(...)`
any measured number. With GROUNDED_RELIABILITY_JSON=<path> the session writes all rows (outcome,
duration, counts, figures) to that file; `scripts/reliability` turns it into the table.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.reliability.world import CanaryWorld, build_world

EVAL_DIR = Path(os.environ.get("GROUNDED_EVAL_DIR", Path(__file__).resolve().parents[3] / "shared" / "eval"))


@dataclass
class Reliability:
    """What one check tried and measured, attached to its test report."""

    counts: dict[str, int] = field(default_factory=dict)
    figures: dict[str, object] = field(default_factory=dict)

    def tried(self, n: int, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + int(n)

    def figure(self, name: str, value: object) -> None:
        self.figures[name] = value


@pytest.fixture
def reliability(request) -> Reliability:
    rel = Reliability()
    yield rel
    request.node.user_properties.append(("reliability", {"counts": rel.counts, "figures": rel.figures}))


_ROWS: dict[str, dict] = {}


def _check_name(item) -> str:
    doc = (getattr(item, "function", None).__doc__ or "").strip() if getattr(item, "function", None) else ""
    return doc.splitlines()[0].rstrip(".") if doc else item.name


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/reliability/" in item.nodeid:
            _ROWS[item.nodeid] = {"nodeid": item.nodeid, "module": item.module.__name__.rsplit(".", 1)[-1],
                                  "function": item.originalname if hasattr(item, "originalname") else item.name,
                                  "check": _check_name(item), "slow": "slow" in item.keywords, "outcome": "not run",
                                  "duration_s": 0.0, "counts": {}, "figures": {}, "message": ""}


def pytest_runtest_logreport(report):
    row = _ROWS.get(report.nodeid)
    if row is None:
        return
    row["duration_s"] = round(row["duration_s"] + report.duration, 2)
    for name, value in report.user_properties:
        if name == "reliability":
            row["counts"].update(value["counts"])
            row["figures"].update(value["figures"])
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        if row["outcome"] in ("not run", "passed") or outcome == "failed":
            row["outcome"] = outcome
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            row["message"] = str(report.longrepr[2])[:300]
        elif report.outcome == "failed":
            row["message"] = str(getattr(report, "longreprtext", ""))[-600:]


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("GROUNDED_RELIABILITY_JSON")
    if not path or not _ROWS:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                      "runslow": bool(session.config.getoption("--runslow")),
                                      "rows": list(_ROWS.values())}, indent=1, default=str))


@pytest.fixture
def canary_world(db) -> CanaryWorld:
    return build_world()


@pytest.fixture
def eval_dir() -> Path:
    if not (EVAL_DIR / "injections.jsonl").exists():
        pytest.skip(f"shared eval data not found under {EVAL_DIR}")
    return EVAL_DIR
