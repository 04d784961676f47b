"""No module of tenants/kb/agents/api reaches another module's private names (docs/architecture.md,
"Layers"): a name starting with one underscore is the business of the module defining it. What one module
offers another has a public name and a docstring stating its contract.

Forbidden, where X is a project module other than the file itself:
  `from X import _y`, `from . import _y`, `import X._y`, and `X._y` / `getattr(X, "_y")` where X is a
  name bound by an import of a project module or of a name defined in one (`import kb.ingest.jobs as jobs;
  jobs._claim(...)`, `from kb.embedded.postgres import PostgresServer; PostgresServer._lock`).
Allowed: dunders (`__future__`, `__name__`), Django's public-by-contract underscore attributes
(`Model._meta`, `Model._default_manager`, ...), and anything on objects that are not imported names.

Ruff's PLC2701 (import-private-name, enabled in pyproject.toml) catches only imports from another top-level
package: `from kb.ingest.jobs import _claim` in kb/ingest/reembed.py passes it, the very case this checks.
Tests, benchmarks and scripts are not scanned: they reset caches and patch internals on purpose.
Pure: reads the source, imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tenants", "kb", "agents", "api")
# Underscore attributes that are a framework's documented API, not a module's private business.
FRAMEWORK_ATTRIBUTES = frozenset({"_meta", "_default_manager", "_base_manager"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in FRAMEWORK_ATTRIBUTES


def module_name(path: Path) -> str:
    """Dotted name of a source file under ROOT (a package's __init__.py is the package)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_project(dotted: str) -> bool:
    return dotted.split(".")[0] in PACKAGES


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module an ImportFrom names, relative imports resolved against `module`."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    drop = node.level - 1 if is_package else node.level
    base = base[: len(base) - drop] if drop else base
    return ".".join(base + ([node.module] if node.module else []))


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def private_reaches(source: str, module: str, is_package: bool = False) -> list[str]:
    """`line: what` for each private name of another project module that `source` (the text of `module`)
    imports or reaches through an imported name."""
    tree = ast.parse(source)
    found: list[str] = []
    bound: dict[str, str] = {}  # local name -> the project module (or module.name) it was imported as

    def other(target: str) -> bool:
        """`target` (a module, or a name in one) is of another project module than this one."""
        own = target == module or (not is_package and target.startswith(f"{module}."))
        return _is_project(target) and not own

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source_module = _absolute(node, module, is_package)
            for alias in node.names:
                if other(source_module) and _private(alias.name):
                    found.append(f"{node.lineno}: from {source_module} import {alias.name}")
                if _is_project(source_module):
                    bound[alias.asname or alias.name] = f"{source_module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if _is_project(alias.name) and any(_private(part) for part in parts[1:]):
                    found.append(f"{node.lineno}: import {alias.name}")
                if _is_project(alias.name):
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound[parts[0]] = parts[0]

    def resolve(expr: ast.expr) -> str | None:
        dotted = _dotted(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head not in bound:
            return None
        return bound[head] + (f".{rest}" if rest else "")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = resolve(node.value)
            if target is not None and other(target):
                found.append(f"{node.lineno}: {target}.{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            target = resolve(node.args[0])
            if target is not None and other(target):
                found.append(f"{node.lineno}: {node.func.id}({target}, {node.args[1].value!r})")
    return sorted(set(found), key=lambda line: (int(line.split(":")[0]), line))


def test_no_module_reaches_another_modules_private_names():
    reaches = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = module_name(path)
            for line in private_reaches(path.read_text(), name, is_package=path.name == "__init__.py"):
                reaches.append(f"{path.relative_to(ROOT)}:{line}")
    assert not reaches, "private names reached across modules (give them a public name with a docstring, " \
                        f"or move the shared piece where both users belong): {reaches}"


def test_the_check_fails_a_private_import_and_passes_a_public_one():
    forbidden = (
        "from kb.ingest.jobs import TRANSIENT_ERRORS, _claim\n"
        "from kb.ingest.jobs import (\n    claim,\n    _fail,\n)\n"
        "from .jobs import _take_lease\n"
        "import kb.ingest._internal\n"
        "from agents import loop\n"
        "import kb.ingest.queue as queue\n"
        "import api.views.agents\n"
        "loop._context(state, ids)\n"
        "queue._embedded_broker_down()\n"
        "api.views.agents._bound('x', 'since', end=False)\n"
        "getattr(loop, '_finish')\n"
    )
    assert private_reaches(forbidden, "kb.ingest.reembed") == [
        "1: from kb.ingest.jobs import _claim",
        "2: from kb.ingest.jobs import _fail",
        "6: from kb.ingest.jobs import _take_lease",
        "7: import kb.ingest._internal",
        "11: agents.loop._context",
        "12: kb.ingest.queue._embedded_broker_down",
        "13: api.views.agents._bound",
        "14: getattr(agents.loop, '_finish')",
    ]
    # The same package counts: kb.ingest.pipeline reaching kb.ingest.jobs is across modules.
    assert private_reaches("from kb.ingest.jobs import _claim\n", "kb.ingest.pipeline")
    assert private_reaches("from kb.ingest.jobs import _claim\n", "api.views.documents")


def test_the_check_passes_public_names_dunders_framework_attributes_and_own_names():
    allowed = (
        "from __future__ import annotations\n"
        "from kb.ingest.jobs import TRANSIENT_ERRORS, claim_job\n"
        "from kb.models import Chunk\n"
        "from kb.embedding import get_embedder as _get_embedder\n"
        "import kb.ingest.queue as queue\n"
        "from django.db import connections\n"
        "from json import _default_decoder\n"
        "queue.embedded_broker_down()\n"
        "Chunk._meta.get_field('text')\n"
        "Chunk._default_manager.all()\n"
        "queue.__name__\n"
        "connections._settings\n"
        "self._lock\n"
        "_get_embedder('hash')\n"
    )
    assert private_reaches(allowed, "kb.ingest.reembed") == []
    # A module's own private names, however it reaches them.
    assert private_reaches("import kb.ingest.jobs as jobs\njobs._claim()\n", "kb.ingest.jobs") == []
