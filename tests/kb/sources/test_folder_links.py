"""Folder reads follow no link (issue 47, finding 2): a file swapped between a regular file and a symlink
to a file outside the roots by a real process while the folder syncs again and again is never read
through the link; a hard link to an outside file is skipped with its reason; symlinks anywhere are
listed with an error, never followed; the folder's descriptor is closed when a sync ends, even a failing one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from kb.models import SourceChange
from kb.sources import sync as sync_module
from kb.sources.services import source_create
from tenants.scope import activate
from tests.kb.sources.conftest import chunk_text, items

pytestmark = pytest.mark.django_db

MARKER = "zebra-quartz-outside-7319"

SWAPPER = textwrap.dedent("""
    import os, sys
    target, outside, stop = sys.argv[1:4]
    folder = os.path.dirname(target)
    regular, link = os.path.join(folder, ".swap-regular"), os.path.join(folder, ".swap-link")
    n = 0
    while not os.path.exists(stop):
        n += 1
        with open(regular, "w") as f:
            f.write(f"# Swap\\n\\nAn ordinary policy, version {n}, about desks and chairs.\\n")
        os.replace(regular, target)
        os.symlink(outside, link)
        os.replace(link, target)
    print(n)
""")


@pytest.fixture
def share(world):
    folder = world["root"] / "share"
    folder.mkdir()
    (folder / "handbook.md").write_text("# Handbook\n\nDesks are cleared every Friday.\n")
    return folder


@pytest.fixture
def outside(tmp_path_factory):
    """A file outside every folder root, holding the marker."""
    path = tmp_path_factory.mktemp("outside") / "outside.md"
    path.write_text(f"# Outside\n\nThe outside secret is {MARKER}.\n")
    return path


def _source(world, share):
    return source_create(scope=world["scope"], corpus=world["corpus"], name="Share", kind="folder",
                         config={"path": str(share)}, schedule_minutes=0)


def _errors(world, source) -> list[str]:
    with activate(world["scope"]):
        return list(SourceChange.objects.for_scope(world["scope"]).filter(sync__source=source, action="failed")
                    .values_list("error", flat=True))


def test_a_file_swapped_with_a_symlink_by_another_process_is_never_read_through_it(world, share, outside, sync_now, tmp_path):
    source = _source(world, share)
    stop = tmp_path / "stop-swapping"
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(share / "swap.md"), str(outside), str(stop)],
                               stdout=subprocess.PIPE, text=True)
    syncs, leaked = [], []
    try:
        time.sleep(0.2)
        for _ in range(30):  # each sync reads the swapped file (its signature changes every swap)
            syncs.append(sync_now(world["scope"], source))
            text = chunk_text(world["scope"], world["corpus"])  # after each: a later sync replaces the version
            leaked += [syncs[-1].pk] if MARKER in text else []
    finally:
        stop.touch()
        swaps = int(swapper.communicate(timeout=30)[0] or 0)
    assert swaps > 100 and all(s.status == "done" for s in syncs)
    assert leaked == [], f"the outside file was ingested by syncs {leaked}"
    assert "Desks are cleared" in chunk_text(world["scope"], world["corpus"])
    # The race was run: the swapped file was met as a link (listed or at open) in some syncs.
    assert any("symbolic link" in e for e in _errors(world, source)), _errors(world, source)


def test_a_hard_link_to_an_outside_file_is_skipped_with_its_reason(world, share, outside, sync_now):
    os.link(outside, share / "hard.md")
    source = _source(world, share)
    sync = sync_now(world["scope"], source)
    assert (sync.status, sync.added, sync.failed) == ("done", 1, 1)
    item = items(world["scope"], source)["hard.md"]
    assert item.state == "failed" and item.error == "has 2 hard links: skipped"
    assert MARKER not in chunk_text(world["scope"], world["corpus"])


def test_symlinks_anywhere_are_listed_with_an_error_and_never_followed(world, share, outside, sync_now):
    (share / "link.md").symlink_to(outside)
    (share / "dirlink").symlink_to(outside.parent, target_is_directory=True)
    (share / "sub").mkdir()
    (share / "sub" / "inner.md").symlink_to(outside)
    source = _source(world, share)
    sync = sync_now(world["scope"], source)
    assert (sync.status, sync.added, sync.failed) == ("done", 1, 3)
    found = items(world["scope"], source)
    assert {k: found[k].error for k in ("link.md", "dirlink", "sub/inner.md")} == dict.fromkeys(
        ("link.md", "dirlink", "sub/inner.md"), "a symbolic link: not followed")
    assert MARKER not in chunk_text(world["scope"], world["corpus"])


def test_a_folder_replaced_by_a_symlink_fails_the_sync(world, share, outside, sync_now):
    source = _source(world, share)
    share.rename(share.with_name("moved"))
    share.symlink_to(outside.parent, target_is_directory=True)  # leads out of the grant: refused as such
    sync = sync_now(world["scope"], source)
    assert sync.status == "failed" and sync.error == "config.path: not under a folder granted to this tenant"
    share.unlink()
    share.symlink_to(share.with_name("moved"), target_is_directory=True)  # leads inside the grant: still a link
    sync = sync_now(world["scope"], source)
    assert sync.status == "failed" and "symbolic link" in sync.error, sync.error
    assert MARKER not in chunk_text(world["scope"], world["corpus"])


def _open_descriptors_of(folder) -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)):
                n += 1
        except OSError:
            pass
    return n


def test_the_folder_descriptor_is_closed_when_a_sync_ends_even_a_failing_one(world, share, sync_now, monkeypatch):
    (share / "sub").mkdir()
    (share / "sub" / "deep.md").write_text("# Deep\n\nA nested file.\n")
    source = _source(world, share)
    assert sync_now(world["scope"], source).status == "done"
    assert _open_descriptors_of(share) == 0

    def broken(self, *args, **kwargs):
        raise RuntimeError("the ingest broke mid-listing")

    (share / "new.md").write_text("# New\n\nA new file.\n")
    monkeypatch.setattr(sync_module._Sync, "_ingest", broken)
    failed = sync_now(world["scope"], source)
    assert failed.status == "failed" and "internal error" in failed.error
    assert _open_descriptors_of(share) == 0
