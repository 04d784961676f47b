"""What each app contributes to the processes the project package starts: health reports and warm-up steps.

An app registers in its `AppConfig.ready()`; the project package (`api/project/health.py`,
`api/project/warmup.py`) reads the registry. It sits in the lowest layer so that any app can register
without importing the project package, which no app does (the import contract in pyproject.toml).

Contracts:
- A health report is a callable returning a JSON-able dict, shown under its name in GET /healthz. It is
  informational: it never blocks on a network call and never turns the status to 503; one that raises is
  reported as its error.
- A warm-up step runs once per process at start, in registration order (apps load in INSTALLED_APPS order),
  in web processes (`web`), Celery pool processes (`worker`) or both. It returns its timings in
  milliseconds ({"search_ms": 12.5}); one that raises fails the warm-up, which /healthz then reports.
  Registering a name again replaces the step (ready() may run twice in tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

HealthReport = Callable[[], dict]
HEALTH_REPORTS: dict[str, HealthReport] = {}


@dataclass(frozen=True)
class WarmupStep:
    name: str
    run: Callable[[], dict[str, float]]
    web: bool = True
    worker: bool = True


WARMUP_STEPS: list[WarmupStep] = []


def register_health_report(name: str, report: HealthReport) -> None:
    """Show `report()` under `name` in GET /healthz."""
    HEALTH_REPORTS[name] = report


def register_warmup_step(name: str, run: Callable[[], dict[str, float]], *, web: bool = True, worker: bool = True) -> None:
    """Run `run()` when a web (`web`) or worker (`worker`) process warms up; see the module contract."""
    step = WarmupStep(name, run, web=web, worker=worker)
    for i, existing in enumerate(WARMUP_STEPS):
        if existing.name == name:
            WARMUP_STEPS[i] = step
            return
    WARMUP_STEPS.append(step)


def warmup_steps(*, web: bool) -> list[WarmupStep]:
    """The steps a web (`web=True`) or worker process runs, in registration order."""
    return [s for s in WARMUP_STEPS if (s.web if web else s.worker)]
