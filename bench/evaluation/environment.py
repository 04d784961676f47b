"""What an evaluation ran on: the code's commit, Python, the numerical libraries and the CPU.

The offline engine's figures are deterministic on one machine: the same corpus ingested twice, and
the same questions run twice, give every question the same outcome. Across machines they are not
guaranteed to be: the embedding model and the cross-encoder run through torch and onnxruntime,
whose kernels differ by CPU instruction set and by release, and a score moved in its last digits
can flip a threshold or a tie. A report therefore states what it ran on, so two reports that
disagree can be told apart as two engines or two machines (docs/evaluation.md, "Run to run").

`run_environment()` reads only local facts (no network, no model load): package versions from the
installed distributions' metadata, the commit from `git` when the code is a checkout, the CPU from
/proc/cpuinfo where there is one.
"""

from __future__ import annotations

import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

# The libraries an answer's numbers pass through: embedding (torch, sentence-transformers,
# tokenizers), the cross-encoder (onnxruntime, tokenizers), vectors (numpy, pgvector's client).
NUMERICAL_PACKAGES = ("torch", "onnxruntime", "numpy", "tokenizers", "sentence-transformers", "pgvector")
# Instruction sets that select different numerical kernels, widest first.
_SIMD_LEVELS = ("avx512_vnni", "avx512f", "avx2", "avx", "sse4_2", "asimd", "neon")
_REPO = Path(__file__).resolve().parents[2]


def run_environment() -> dict[str, str]:
    """{"commit", "python", "<package>" for each of NUMERICAL_PACKAGES, "cpu"}: "unknown" (commit),
    "not installed" (a package) or "" (cpu) when a fact cannot be read. Read once per process; each
    caller gets its own copy to put in a report."""
    return dict(_read_environment())


@lru_cache(maxsize=1)
def _read_environment() -> dict[str, str]:
    env = {"commit": _commit(), "python": platform.python_version()}
    for name in NUMERICAL_PACKAGES:
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env[name] = "not installed"
    env["cpu"] = _cpu()
    return env


def describe(env: dict[str, str] | None) -> str:
    """One line for a report: "commit 1a2b3c4, Python 3.11.2, torch 2.13.0+cpu, ..., CPU AMD EPYC (avx512_vnni)"."""
    if not env:
        return "not recorded"
    packages = ", ".join(f"{name} {env[name]}" for name in NUMERICAL_PACKAGES if name in env)
    return f"commit {env.get('commit', 'unknown')}, Python {env.get('python', '?')}, {packages}, CPU {env.get('cpu') or 'unknown'}"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(_REPO), "describe", "--always", "--dirty", "--abbrev=12"],  # noqa: S603, S607
                             capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def _cpu() -> str:
    """"<model name> (<widest SIMD level>)" from /proc/cpuinfo; the platform's processor string elsewhere."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor()
    fields: dict[str, str] = {}
    for line in info.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or fields.get("CPU part") or platform.machine()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    level = next((f for f in _SIMD_LEVELS if f in flags), "")
    return f"{model} ({level})" if level else model
