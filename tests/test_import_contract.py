"""The import contract ([tool.importlinter] in pyproject.toml, run by scripts/test) fails on a forbidden import.

Each test builds a throwaway tree with the four packages' names, writes a config holding the same
contract definition read from the real pyproject.toml, and runs `lint-imports` on it in a fresh
process (a process that has imported the real packages would find those instead of the fake ones).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _contract_config() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]


def _layers() -> list[str]:
    """The layers contract's packages, top first."""
    (contract,) = [c for c in _contract_config()["contracts"] if c["type"] == "layers"]
    return contract["layers"]


def _write_toml(config: dict, path: Path) -> None:
    # The section holds only strings, booleans and lists of them, whose JSON spelling is valid TOML.
    lines = ["[tool.importlinter]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in config.items() if key != "contracts"]
    for contract in config["contracts"]:
        lines += ["", "[[tool.importlinter.contracts]]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in contract.items()]
    path.write_text("\n".join(lines) + "\n")


def _write_tree(root: Path) -> None:
    """Each package with a `models` module that imports the layer just below it (an allowed import)."""
    layers = _layers()
    for upper, lower in zip(layers, [*layers[1:], None], strict=True):
        package = root / upper
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "models.py").write_text(f"from {lower} import models  # noqa\n" if lower else "")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    _write_toml(_contract_config(), root / "pyproject.toml")
    executable = Path(sys.executable).parent / "lint-imports"
    command = str(executable) if executable.exists() else shutil.which("lint-imports")
    assert command, "lint-imports is not installed (pip install -e '.[dev]')"
    return subprocess.run(
        [command, "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_contract_layers_the_four_packages_top_down():
    assert _contract_config()["root_packages"] == ["tenants", "kb", "agents", "api"]
    assert _layers() == ["api", "agents", "kb", "tenants"]


def test_a_tree_that_imports_only_downwards_passes(tmp_path):
    _write_tree(tmp_path)
    result = _lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


UPWARD = [(lower, upper) for i, upper in enumerate(_layers()) for lower in _layers()[i + 1 :]]


@pytest.mark.parametrize(("importer", "imported"), UPWARD, ids=[f"{a}->{b}" for a, b in UPWARD])
def test_an_upward_import_inside_an_admin_function_breaks_the_contract(tmp_path, importer, imported):
    _write_tree(tmp_path)
    (tmp_path / importer / "admin.py").write_text(f"def changelist():\n    from {imported} import models\n\n    return models\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 kept, 1 broken" in result.stdout
    assert f"{importer} is not allowed to import {imported}" in result.stdout
    assert f"{importer}.admin -> {imported}.models (l.2)" in result.stdout


def import_cycles(*packages: str) -> list[tuple[str, str]]:
    """Pairs of modules of `packages` that import each other, directly or through others (grimp: the
    graph import-linter builds, imports inside functions included)."""
    import grimp

    graph = grimp.build_graph(*packages, include_external_packages=False)
    pairs = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.find_shortest_chain(importer=imported, imported=module):
                pairs.add(tuple(sorted((module, imported))))
    return sorted(pairs)


def test_no_module_imports_itself_through_others():
    assert import_cycles("tenants", "kb", "agents", "api") == []


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    (tmp_path / "loopy").mkdir()
    (tmp_path / "loopy" / "__init__.py").write_text("")
    (tmp_path / "loopy" / "a.py").write_text("from loopy import b\n")
    (tmp_path / "loopy" / "b.py").write_text("def f():\n    from loopy import a\n\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("loopy") == [("loopy.a", "loopy.b")]
