"""Imports sit at the top of a module (docs/architecture.md, "Layers"). An import inside a function is
allowed only with a comment saying why (an optional dependency, a slow import on one optional path,
Django's app loading), on its line or above its group of imports. Pure: reads the source, imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tenants", "kb", "agents", "api")


def uncommented_function_imports(source: str) -> list[int]:
    """Line numbers of imports inside a function with no comment on their line, nor on the line above
    their group (the imports and blank lines right before them)."""
    lines = source.splitlines()
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if not isinstance(inner, ast.Import | ast.ImportFrom):
                continue
            if "#" in lines[inner.lineno - 1]:
                continue
            above = inner.lineno - 2
            while above >= 0 and (not lines[above].strip() or lines[above].lstrip().startswith(("import ", "from "))):
                if "#" in lines[above]:
                    break
                above -= 1
            if not (above >= 0 and (lines[above].lstrip().startswith("#") or "#" in lines[above]
                                    and lines[above].lstrip().startswith(("import ", "from ")))):
                found.add(inner.lineno)
    return sorted(found)


def test_every_import_inside_a_function_says_why():
    bare = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            bare += [f"{path.relative_to(ROOT)}:{n}" for n in uncommented_function_imports(path.read_text())]
    assert not bare, f"imports inside functions without a comment saying why (move them to the top): {bare}"


def test_the_check_finds_a_bare_import_and_accepts_a_commented_group():
    source = (
        "def bare():\n    import json\n\n    return json\n\n\n"
        "def commented():\n    # optional dependency: only here\n    import numpy\n    from scipy import linalg\n\n"
        "    return numpy, linalg\n\n\n"
        "def inline():\n    import yaml  # optional dependency\n\n    return yaml\n"
    )
    assert uncommented_function_imports(source) == [2]
