"""Folder source: a local or mounted folder, read recursively. Signature: size + mtime (ns), so an
unchanged file is not even opened. Only folders under SOURCES_FOLDER_ROOTS may be read (the tenant's
folder grants are checked by kb.sources.grants), and no link is ever followed.

Reads follow no link and leave no window between a check and a read: the folder is opened once, one
component at a time from "/" with O_NOFOLLOW | O_DIRECTORY (a symlink anywhere on its path: the sync
fails); the walk lists each directory through its descriptor (a symlink is listed with an error, never
followed); each file is opened at fetch time relative to the folder's descriptor, one component at a
time with O_NOFOLLOW, and checked on the descriptor it will be read from (fstat: a regular file with
one link, else an item error). A file swapped for a symlink between listing and reading is refused by
the open itself.

config: {"path": "/mnt/policies", "include_hidden": false}
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Generator, Iterator
from functools import partial
from pathlib import PurePosixPath

from kb.sources.base import ConfigField, Entry, ItemError, SourceError
from kb.sources.grants import folder_under_ceiling
from tenants.conf import product_settings

FIELDS = (
    ConfigField("path", "Folder path", required=True,
                help="The folder's absolute path on the server, under a folder granted to this tenant."),
    ConfigField("include_hidden", "Include hidden files", type="bool", help="Also read files and folders whose name starts with a dot."),
)
FAULT_FIELD = "path"  # the setting to blame when the folder cannot be listed

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)  # O_NOFOLLOW met a symlink (or a non-folder on the way)


def check_config(config: dict) -> dict:
    path = config.get("path")
    if not isinstance(path, str) or not path.strip():
        raise SourceError("config.path: the folder's absolute path is required")
    return {"path": folder_under_ceiling(path.strip()), "include_hidden": bool(config.get("include_hidden", False))}


def open_folder(path: str) -> int:
    """A descriptor of the absolute folder `path`, opened from "/" one component at a time, following no
    link. Raises SourceError when a component is a symlink, not a folder, or cannot be opened."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        for name in PurePosixPath(path).parts[1:]:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        if exc.errno in _LINK_ERRORS:
            raise SourceError(f"folder {path}: a symbolic link or not a folder on its path (links are not followed)") from None
        raise SourceError(f"folder {path} cannot be opened: {exc.strerror}") from None
    return fd


class FolderListing:
    """The folder's files, walked through descriptors. The folder's descriptor lives while the listing
    is iterated (the sync fetches each entry as it is listed) and is closed when the iteration ends,
    fails or is dropped; a fetch after that is an item error."""

    def __init__(self, config: dict, secret: dict) -> None:
        self.path = str(config["path"])  # a real path when checked: a link on it since is refused, not resolved
        if folder_under_ceiling(self.path) != self.path:
            raise SourceError(f"folder {self.path}: a symbolic link on its path (links are not followed)")
        self.include_hidden = bool(config.get("include_hidden", False))
        self.complete = False
        self._root: int | None = None

    def __iter__(self) -> Iterator[Entry]:
        self._root = open_folder(self.path)
        try:
            walked_all = yield from self._walk(self._root, ())
            self.complete = walked_all
        finally:
            root, self._root = self._root, None
            os.close(root)

    def _walk(self, dir_fd: int, where: tuple[str, ...]) -> Generator[Entry, None, bool]:
        """Entries of the directory `dir_fd` (at `where` under the root), depth first, by name; returns
        True when every subdirectory could be opened."""
        try:
            with os.scandir(dir_fd) as it:
                found = sorted(((e.name, e) for e in it), key=lambda pair: pair[0])
        except OSError as exc:
            raise SourceError(f"cannot read folder {self.path}: {exc.strerror}") from None
        walked_all = True
        for name, entry in found:
            if not self.include_hidden and name.startswith("."):
                continue
            parts = (*where, name)
            key = "/".join(parts)
            try:
                if entry.is_symlink():
                    yield _failed(key, "a symbolic link: not followed")
                elif entry.is_dir(follow_symlinks=False):
                    try:
                        sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                    except OSError as exc:  # swapped for a link since it was listed, or unreadable
                        walked_all = False
                        yield _failed(key, _reason(exc))
                        continue
                    try:
                        walked_all = (yield from self._walk(sub, parts)) and walked_all
                    finally:
                        os.close(sub)
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)  # fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW)
                    yield Entry(key=key, signature=f"{st.st_size}:{st.st_mtime_ns}", size=st.st_size,
                                fetch=partial(self._read, parts))
                else:
                    yield _failed(key, "not a regular file: skipped")
            except OSError as exc:
                yield _failed(key, f"cannot stat: {exc.strerror}")
        return walked_all

    def _read(self, parts: tuple[str, ...]) -> bytes:
        """The bytes of the file at `parts` under the root, opened relative to the root's descriptor one
        component at a time, following no link; a regular file with one link, at most MAX_UPLOAD_BYTES."""
        if self._root is None:
            raise ItemError("the folder is no longer open (read during the listing only)")
        opened: list[int] = []
        try:
            at = self._root
            for name in parts[:-1]:
                at = os.open(name, _DIR_FLAGS, dir_fd=at)
                opened.append(at)
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=at)
            opened.append(fd)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ItemError("not a regular file: skipped")
            if st.st_nlink > 1:
                raise ItemError(f"has {st.st_nlink} hard links: skipped")
            limit = product_settings.MAX_UPLOAD_BYTES
            if st.st_size > limit:
                raise ItemError(f"larger than {limit} bytes")
            chunks, total = [], 0
            while total <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            if total > limit:
                raise ItemError(f"larger than {limit} bytes")
            return b"".join(chunks)
        except OSError as exc:
            raise ItemError(_reason(exc)) from None
        finally:
            for fd in reversed(opened):
                os.close(fd)


def _reason(exc: OSError) -> str:
    if exc.errno in _LINK_ERRORS:
        return "a symbolic link (or not a folder) on its path: not followed"
    return f"cannot read: {exc.strerror}"


def _failed(key: str, reason: str) -> Entry:
    return Entry(key=key, signature="", size=0, fetch=_nothing, error=reason)


def _nothing() -> bytes:
    raise ItemError("not readable")
