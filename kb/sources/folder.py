"""Folder source: a local or mounted folder, read recursively. Signature: size + mtime (ns), so an
unchanged file is not even opened. Only folders under SOURCES_FOLDER_ROOTS may be read, and no
symlink leads out of the source's folder.

config: {"path": "/mnt/policies", "include_hidden": false}
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from kb.sources.base import Entry, ItemError, SourceError


def check_config(config: dict) -> dict:
    path = config.get("path")
    if not isinstance(path, str) or not path.strip():
        raise SourceError("config.path: the folder's absolute path is required")
    resolved = _allowed(path.strip())
    return {"path": str(resolved), "include_hidden": bool(config.get("include_hidden", False))}


def _allowed(path: str) -> Path:
    if not os.path.isabs(path):
        raise SourceError("config.path: must be an absolute path")
    resolved = Path(path).resolve()
    roots = [Path(r).resolve() for r in settings.SOURCES_FOLDER_ROOTS]
    if not roots:
        raise SourceError("config.path: folder sources are off on this server (set SOURCES_FOLDER_ROOTS)")
    if not any(resolved == r or r in resolved.parents for r in roots):
        raise SourceError("config.path: not under a folder this server allows (SOURCES_FOLDER_ROOTS)")
    return resolved


class FolderListing:
    def __init__(self, config: dict, secret: dict) -> None:
        self.root = _allowed(config["path"])
        self.include_hidden = bool(config.get("include_hidden", False))
        self.complete = False

    def __iter__(self) -> Iterator[Entry]:
        if not self.root.is_dir():
            raise SourceError(f"folder {self.root} does not exist or is not a folder")
        for dirpath, dirnames, filenames in os.walk(self.root, onerror=_raise):
            if not self.include_hidden:
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            dirnames.sort()
            for name in sorted(filenames):
                if not self.include_hidden and name.startswith("."):
                    continue
                path = Path(dirpath) / name
                key = path.relative_to(self.root).as_posix()
                try:
                    if path.is_symlink() and self.root not in path.resolve().parents:
                        yield Entry(key=key, signature="", size=0, fetch=_nothing, error="symlink out of the source folder")
                        continue
                    st = path.stat()
                except OSError as exc:
                    yield Entry(key=key, signature="", size=0, fetch=_nothing, error=f"cannot stat: {exc.strerror}")
                    continue
                yield Entry(key=key, signature=f"{st.st_size}:{st.st_mtime_ns}", size=st.st_size, fetch=_reader(path))
        self.complete = True


def _raise(exc: OSError) -> None:
    raise SourceError(f"cannot read folder: {exc}")


def _nothing() -> bytes:
    raise ItemError("not readable")


def _reader(path: Path):
    def fetch() -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ItemError(f"cannot read: {exc.strerror}") from None
    return fetch
