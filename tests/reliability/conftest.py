"""Reliability suite fixtures: the canary world, the eval data, and `reliability` (what a check tried).

Every test here is one row of docs/reliability.md: its docstring's first line names the check,
`reliability.tried(n, what)` records what was tried and `reliability.figure(name, value)` a measured
number. The rows are collected by tests.reliability.plugin, which `scripts/reliability` loads.
"""

from __future__ import annotations

import os
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


@pytest.fixture
def canary_world(db) -> CanaryWorld:
    return build_world()


@pytest.fixture
def eval_dir() -> Path:
    if not (EVAL_DIR / "injections.jsonl").exists():
        pytest.skip(f"shared eval data not found under {EVAL_DIR}")
    return EVAL_DIR
