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


def _layer_groups() -> list[list[str]]:
    """The layers contract's layers, top first, each the packages it holds ("api | bench": two independent ones)."""
    (contract,) = [c for c in _contract_config()["contracts"] if c["type"] == "layers"]
    return [[name.strip() for name in layer.split("|")] for layer in contract["layers"]]


def _layers() -> list[str]:
    """The layers contract's packages, top first (each layer's packages in their order)."""
    return [name for group in _layer_groups() for name in group]


def _project_contract() -> dict:
    (contract,) = [c for c in _contract_config()["contracts"] if c["id"] == "project"]
    return contract


def _write_toml(config: dict, path: Path) -> None:
    # The section holds only strings, booleans and lists of them, whose JSON spelling is valid TOML.
    lines = ["[tool.importlinter]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in config.items() if key != "contracts"]
    for contract in config["contracts"]:
        lines += ["", "[[tool.importlinter.contracts]]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in contract.items()]
    path.write_text("\n".join(lines) + "\n")


def _write_module(root: Path, dotted: str, text: str = "") -> None:
    """A module at `dotted` (a package's __init__ when it has children later), with its parent packages."""
    *parents, name = dotted.split(".")
    folder = root
    for part in parents:
        folder = folder / part
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()
    (folder / f"{name}.py").write_text(text)


def _write_tree(root: Path) -> None:
    """Each package with a `models` module that imports a package of the layer just below it (an allowed
    import); the project package inside api, importing the apps (allowed), and the api modules the
    project contract names."""
    groups = _layer_groups()
    for upper, lower in zip(groups, [*groups[1:], None], strict=True):
        for package in upper:
            _write_module(root, f"{package}.models", f"from {lower[0]} import models  # noqa\n" if lower else "")
    # The project names bench.evaluation only as a string (INSTALLED_APPS): api and bench stay independent.
    _write_module(root, "api.project.settings", "".join(f"from {p} import models  # noqa\n" for p in _layers() if p != "bench"))
    for module in _project_contract()["source_modules"]:
        if module.startswith("api.") and not (root / module.replace(".", "/")).exists():
            _write_module(root, module)


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
    assert _contract_config()["root_packages"] == ["tenants", "kb", "agents", "api", "bench"]
    assert _layer_groups() == [["api", "bench"], ["agents"], ["kb"], ["tenants"]]


def test_the_project_contract_names_every_app_and_every_api_module_but_the_project_package():
    """A module added to api must join the list, or the project contract would not cover it."""
    api = Path(__file__).resolve().parent.parent / "api"
    api_modules = {f"api.{p.stem}" for p in api.iterdir() if (p.suffix == ".py" or (p / "__init__.py").exists())
                   and p.stem not in {"__init__", "project"}}
    sources = set(_project_contract()["source_modules"])
    assert sources == {"tenants", "kb", "agents", "bench"} | api_modules
    assert _project_contract()["forbidden_modules"] == ["api.project"]


def test_a_tree_that_imports_only_downwards_passes(tmp_path):
    _write_tree(tmp_path)
    result = _lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("importer", ["tenants.models", "kb.models", "agents.models", "bench.models", "api.views"])
def test_an_app_that_imports_the_project_package_breaks_the_contract(tmp_path, importer):
    _write_tree(tmp_path)
    _write_module(tmp_path, importer, "def setting():\n    from api.project import settings\n\n    return settings\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No app imports the project package BROKEN" in result.stdout
    assert f"{importer} -> api.project.settings (l.2)" in result.stdout


UPWARD = [(lower, upper) for i, group in enumerate(_layer_groups()) for upper in group
          for lower_group in _layer_groups()[i + 1 :] for lower in lower_group]


@pytest.mark.parametrize(("importer", "imported"), UPWARD, ids=[f"{a}->{b}" for a, b in UPWARD])
def test_an_upward_import_inside_an_admin_function_breaks_the_contract(tmp_path, importer, imported):
    _write_tree(tmp_path)
    (tmp_path / importer / "admin.py").write_text(f"def changelist():\n    from {imported} import models\n\n    return models\n")
    result = _lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 kept, 1 broken" in result.stdout
    assert f"{importer} is not allowed to import {imported}" in result.stdout
    assert f"{importer}.admin -> {imported}.models (l.2)" in result.stdout


def import_cycles(*packages: str) -> list[tuple[str, str]]:
    """Pairs of modules of `packages` that import each other, directly or through others (grimp: the
    graph import-linter builds, imports inside functions included). Imports under `if TYPE_CHECKING:`
    do not count: they never run, and they let a stage annotate with the types its caller passes in
    (kb/retrieval's stages and the search entry that calls them)."""
    import grimp

    graph = grimp.build_graph(*packages, include_external_packages=False, exclude_type_checking_imports=True)
    pairs = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.find_shortest_chain(importer=imported, imported=module):
                pairs.add(tuple(sorted((module, imported))))
    return sorted(pairs)


def test_no_module_imports_itself_through_others():
    assert import_cycles("tenants", "kb", "agents", "api", "bench") == []


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    (tmp_path / "loopy").mkdir()
    (tmp_path / "loopy" / "__init__.py").write_text("")
    (tmp_path / "loopy" / "a.py").write_text("from loopy import b\n")
    (tmp_path / "loopy" / "b.py").write_text("def f():\n    from loopy import a\n\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("loopy") == [("loopy.a", "loopy.b")]
