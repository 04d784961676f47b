"""Folder sources: add / modify / delete upstream, moves between mapped folders, a corrupt file, an
interrupted sync, and unchanged files costing nothing. (The lock, for every kind: test_source_lock.py.)"""

from __future__ import annotations

import os
import time

import pytest

from kb.embedding import HashEmbedder
from kb.models import Chunk, Corpus, Document, IngestJob, SourceSync
from kb.sources import sync as sync_module
from kb.sources.services import source_create
from kb.sources.sync import request_sync
from tenants.scope import NotAllowed, activate
from tests.kb.sources.conftest import changes, chunk_rows, corpus_state, items

pytestmark = pytest.mark.django_db


def write(root, rel: str, text: str, mtime: float | None = None) -> None:
    path = root / "share" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def policy(title: str, n: int = 3) -> str:
    return f"# {title}\n\n" + "\n\n".join(f"{title} rule {i}: employees must file form {i} within {i + 2} days." for i in range(n))


@pytest.fixture
def folder(world):
    root = world["root"]
    write(root, "hr/leave.md", policy("Leave"))
    write(root, "hr/benefits.md", policy("Benefits"))
    write(root, "finance/expenses.md", policy("Expenses"))
    write(root, "public/about.txt", "About Acme. Acme makes anvils for the whole world.")
    source = source_create(scope=world["scope"], corpus=world["corpus"], name="Share", kind="folder",
                           config={"path": str(root / "share")},
                           department_rules=[{"prefix": "hr/", "department": world["hr"].pk},
                                             {"prefix": "finance/", "department": world["finance"].pk},
                                             {"prefix": "public/", "department": None}])
    return source


def test_first_sync_ingests_every_file_into_its_mapped_department(world, folder, sync_now):
    sync = sync_now(world["scope"], folder)
    assert (sync.status, sync.added, sync.failed, sync.complete_listing) == ("done", 4, 0, True)
    state = corpus_state(world["scope"], world["corpus"])
    hr, fin = world["hr"].pk, world["finance"].pk
    assert {k: (v[0], v[1], v[3]) for k, v in state.items()} == {
        "hr/leave.md": (hr, "ready", {hr}), "hr/benefits.md": (hr, "ready", {hr}),
        "finance/expenses.md": (fin, "ready", {fin}), "public/about.txt": (None, "ready", {None})}


def test_add_modify_delete_upstream_is_mirrored_and_unchanged_files_cost_nothing(world, folder, monkeypatch, sync_now):
    scope, root = world["scope"], world["root"]
    sync_now(scope, folder)
    with activate(scope):
        leave = Document.objects.for_scope(scope).get(source_name__endswith=":hr/leave.md")
    embedded: list[str] = []
    original = HashEmbedder.embed

    def counting(self, texts, task="document"):
        embedded.extend(texts)
        return original(self, texts, task)

    monkeypatch.setattr(HashEmbedder, "embed", counting)

    second = sync_now(scope, folder)
    assert (second.added, second.changed, second.removed, second.unchanged, second.failed) == (0, 0, 0, 4, 0)
    assert embedded == [] and changes(scope, second) == []

    write(root, "hr/leave.md", policy("Leave") + "\n\nLeave rule 9: parental leave is sixteen weeks.")
    write(root, "hr/new.md", policy("Onboarding"))
    (root / "share" / "public" / "about.txt").unlink()
    third = sync_now(scope, folder)
    assert changes(scope, third) == [("added", "hr/new.md"), ("changed", "hr/leave.md"), ("removed", "public/about.txt")]
    assert (third.added, third.changed, third.removed, third.unchanged) == (1, 1, 1, 2)
    state = corpus_state(scope, world["corpus"])
    assert set(state) == {"hr/leave.md", "hr/benefits.md", "finance/expenses.md", "hr/new.md"}
    with activate(scope):
        leave = Document.objects.for_scope(scope).get(pk=leave.pk)
        assert leave.version == 2 and "sixteen weeks" in " ".join(
            Chunk.objects.for_scope(scope).filter(document=leave).values_list("text", flat=True))
    # only the new and changed texts were embedded (the rest came from the embedding cache)
    assert embedded and all("Leave" in t or "Onboarding" in t for t in embedded)
    # the removed item is kept for audit: which sync removed which version
    it = items(scope, folder)["public/about.txt"]
    assert it.state == "removed" and it.document_id is not None and it.changed_by_sync_id == third.pk


def test_touched_but_identical_file_is_not_reingested(world, folder, sync_now):
    scope, root = world["scope"], world["root"]
    sync_now(scope, folder)
    with activate(scope):
        jobs_before = IngestJob.objects.for_scope(scope).count()
    write(root, "hr/leave.md", policy("Leave"), mtime=time.time() + 100)
    sync = sync_now(scope, folder)
    assert (sync.changed, sync.unchanged) == (0, 4)
    with activate(scope):
        assert IngestJob.objects.for_scope(scope).count() == jobs_before


def test_file_moved_between_mapped_folders_moves_its_chunks_department_without_reingesting(world, folder, sync_now):
    scope, root = world["scope"], world["root"]
    sync_now(scope, folder)
    with activate(scope):
        doc = Document.objects.for_scope(scope).get(source_name__endswith=":hr/benefits.md")
        chunk_ids = set(Chunk.objects.for_scope(scope).filter(document=doc).values_list("id", flat=True))
        jobs_before = IngestJob.objects.for_scope(scope).count()
    (root / "share" / "hr" / "benefits.md").rename(root / "share" / "finance" / "benefits.md")
    sync = sync_now(scope, folder)
    assert (sync.moved, sync.added, sync.removed) == (1, 0, 0)
    fin = world["finance"].pk
    with activate(scope):
        doc = Document.objects.for_scope(scope).get(pk=doc.pk)
        assert doc.source_name.endswith(":finance/benefits.md") and doc.department_id == fin
        assert set(Chunk.objects.for_scope(scope).filter(document=doc).values_list("id", flat=True)) == chunk_ids
        assert set(Chunk.objects.for_scope(scope).filter(document=doc).values_list("department_id", flat=True)) == {fin}
        assert IngestJob.objects.for_scope(scope).count() == jobs_before
    assert "hr/benefits.md" not in items(scope, folder)


def test_changing_the_rules_moves_departments_on_the_next_sync(world, folder, sync_now):
    from kb.sources.services import source_update

    scope = world["scope"]
    sync_now(scope, folder)
    source_update(scope=scope, source=folder, department_rules=[{"prefix": "", "department": world["hr"].pk}])
    sync = sync_now(scope, folder)
    assert sync.moved == 2  # finance/ and public/ went to HR; hr/ stayed
    hr = world["hr"].pk
    assert {v[0] for v in corpus_state(scope, world["corpus"]).values()} == {hr}
    assert {v[3] == {hr} for v in corpus_state(scope, world["corpus"]).values()} == {True}


def test_a_corrupt_file_fails_alone_and_a_good_old_version_stays(world, folder, sync_now):
    scope, root = world["scope"], world["root"]
    (root / "share" / "hr" / "scan.pdf").write_bytes(b"%PDF-1.4 garbage that is no pdf")
    first = sync_now(scope, folder)
    assert (first.added, first.failed) == (4, 1)
    assert items(scope, folder)["hr/scan.pdf"].state == "failed"
    write(root, "finance/expenses.md", "")  # now empty: no text
    second = sync_now(scope, folder)
    assert second.failed == 2 and ("failed", "finance/expenses.md") in changes(scope, second)
    state = corpus_state(scope, world["corpus"])
    assert state["finance/expenses.md"][1] == "ready" and state["finance/expenses.md"][2] > 0  # the old version still answers
    assert "hr/scan.pdf" not in state


def test_an_interrupted_sync_is_resumed_by_the_next_with_chunks_exactly_once(world, folder, monkeypatch, sync_now,
                                                                             django_capture_on_commit_callbacks):
    scope, root = world["scope"], world["root"]
    for i in range(6):
        write(root, f"hr/extra{i}.md", policy(f"Extra{i}"))
    calls = {"n": 0}
    original = sync_module._Sync._ingest

    def dying(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise SystemExit("worker killed")  # not caught by the sync: like a SIGKILL, nothing after it runs
        return original(self, *args, **kwargs)

    monkeypatch.setattr(sync_module._Sync, "_ingest", dying)
    monkeypatch.setattr(sync_module, "batch_items", lambda: 2)  # items commit two by two: the kill loses the open batch
    with pytest.raises(SystemExit), django_capture_on_commit_callbacks(execute=True):
        request_sync(scope=scope, source=folder)
    with activate(scope):
        dead = SourceSync.objects.for_scope(scope).get(source=folder)
        assert dead.status == "running"
    monkeypatch.setattr(sync_module._Sync, "_ingest", original)
    sync = sync_now(scope, folder)
    assert sync.status == "done" and sync.added == 10 - 2 and sync.unchanged == 2  # the third item's batch was rolled back
    with activate(scope):
        assert SourceSync.objects.for_scope(scope).get(pk=dead.pk).status == "interrupted"
        docs = list(Document.objects.for_scope(scope).filter(corpus=world["corpus"]))
        corpus = Corpus.objects.for_scope(scope).get(pk=world["corpus"].pk)
    rows = chunk_rows(scope, world["corpus"])
    assert len(docs) == 10 and {d.status for d in docs} == {"ready"}
    assert len(rows) == len(set(rows)) == sum(d.chunk_count for d in docs) == corpus.chunk_count


def test_a_paused_source_is_not_synced(world, folder):
    from kb.sources.services import source_update

    source_update(scope=world["scope"], source=folder, paused=True)
    with pytest.raises(NotAllowed):
        request_sync(scope=world["scope"], source=folder)


def test_folder_sources_only_under_allowed_roots(world, settings):
    settings.SOURCES_FOLDER_ROOTS = [str(world["root"] / "share")]
    with pytest.raises(NotAllowed, match="SOURCES_FOLDER_ROOTS"):
        source_create(scope=world["scope"], corpus=world["corpus"], name="Etc", kind="folder", config={"path": "/etc"})
    with pytest.raises(NotAllowed, match="SOURCES_FOLDER_ROOTS"):
        source_create(scope=world["scope"], corpus=world["corpus"], name="Up", kind="folder",
                      config={"path": str(world["root"] / "share" / "..")})


def test_a_document_deleted_by_hand_comes_back_on_the_next_sync(world, folder, sync_now):
    from kb.ingest import delete_document

    scope = world["scope"]
    sync_now(scope, folder)
    with activate(scope):
        doc = Document.objects.for_scope(scope).get(source_name__endswith=":hr/leave.md")
        delete_document(scope=scope, document=doc)
    sync = sync_now(scope, folder)
    assert (sync.added, sync.unchanged) == (1, 3)
    assert corpus_state(scope, world["corpus"])["hr/leave.md"][1] == "ready"


def test_synced_documents_are_titled_by_their_heading_or_file_name_never_the_source_prefix(world, sync_now):
    """Issue 52: folder documents were titled `folder:1:canteen` in citations and lists."""
    root = world["root"]
    write(root, "canteen.md", "Lunch is served from noon to two. The canteen closes on public holidays.")
    write(root, "hr/leave.md", policy("Leave"))
    write(root, "notes/parking_rules.txt", "Visitors park on level two. Staff park on level three.")
    source = source_create(scope=world["scope"], corpus=world["corpus"], name="Share", kind="folder",
                           config={"path": str(root / "share")}, department_rules=[])
    assert sync_now(world["scope"], source).status == "done"
    with activate(world["scope"]):
        titles = {d.source_name.split(":", 2)[2]: d.title for d in Document.objects.for_scope(world["scope"])}
    assert titles == {"canteen.md": "canteen", "hr/leave.md": "Leave", "notes/parking_rules.txt": "parking_rules"}
    assert sync_module.item_title("folder:7:canteen", "folder:7:canteen.md", "canteen.md") == "canteen"
    assert sync_module.item_title("Canteen menu", "folder:7:canteen.md", "canteen.md") == "Canteen menu"
