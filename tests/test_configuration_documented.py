"""Every environment variable the product reads is documented in docs/configuration.md, and every one
documented there is read somewhere (issue 30: one place that says how the product is configured)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "api", "kb", "tenants")
# A read of an environment variable: os.environ.get("X"), os.getenv("X"), os.environ["X"], env_int("X"), _int("X") ...
READ = re.compile(r"""(?:environ\.get|getenv|environ\[|\benv_int|\benv_bool|\benv_float|\b_int)\(?\s*["']([A-Z][A-Z0-9_]+)["']""")
SHELL_READ = re.compile(r"\$\{([A-Z][A-Z0-9_]+)")
DOCUMENTED = re.compile(r"^\|\s*`([A-Z][A-Z0-9_]+)`", re.M)


def read_variables() -> set[str]:
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(READ.findall(path.read_text()))
    for script in ("run", "bootstrap.sh", "test"):
        names |= set(SHELL_READ.findall((ROOT / "scripts" / script).read_text()))
    return names


def test_every_variable_read_is_documented_and_every_documented_one_is_read():
    documented = set(DOCUMENTED.findall((ROOT / "docs" / "configuration.md").read_text()))
    read = read_variables()
    assert not read - documented, f"read but not in docs/configuration.md: {sorted(read - documented)}"
    assert not documented - read, f"in docs/configuration.md but read nowhere: {sorted(documented - read)}"
