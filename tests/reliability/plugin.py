"""pytest plugin behind docs/reliability.md (loaded by scripts/reliability with -p tests.reliability.plugin).

Records one row per test: the check (the test's docstring's first line), outcome, duration, and
what the `reliability` fixture recorded (counts tried, figures measured); writes them as JSON to
GROUNDED_RELIABILITY_JSON at the end of the session. Tests outside tests/reliability (the schema
fuzz, for instance) get rows too when they are part of the run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

_ROWS: dict[str, dict] = {}


def _check_name(item) -> str:
    fn = getattr(item, "function", None)
    doc = (fn.__doc__ or "").strip() if fn is not None else ""
    if not doc:
        doc = (getattr(item.module, "__doc__", "") or "").strip()
    return " ".join(doc.split("\n\n")[0].split()).rstrip(".") if doc else item.name


def pytest_collection_modifyitems(config, items):
    for item in items:
        _ROWS[item.nodeid] = {"nodeid": item.nodeid, "module": item.module.__name__, "function": getattr(item, "originalname", item.name),
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
            row["message"] = str(report.wasxfail)[:400]
        elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            row["message"] = str(report.longrepr[2])[:300]
        elif report.outcome == "failed":
            row["message"] = str(getattr(report, "longreprtext", ""))[-600:]
        if row["outcome"] in ("not run", "passed") or outcome == "failed":
            row["outcome"] = outcome


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("GROUNDED_RELIABILITY_JSON")
    if not path or not _ROWS:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"finished_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                      "runslow": bool(session.config.getoption("--runslow", default=False)),
                                      "exitstatus": int(exitstatus), "rows": list(_ROWS.values())}, indent=1, default=str))
