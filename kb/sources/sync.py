"""Syncing a source into its corpus: incremental, idempotent, one at a time per source, resumable.

- One sync per source at a time: a session advisory lock on the source id is held while a sync runs (it dies
  with the worker's session). `request_sync` joins a sync queued or running; a second worker refuses its sync.
- Incremental: each upstream item's signature (ETag, size+mtime, or for pages the content hash) is compared
  with what the last sync saw; unchanged items are not fetched, and an item whose bytes did not change (same
  sha256) is not re-ingested. New and changed items go through `kb.ingest.upload_document` (versions, jobs,
  progress as for uploads), and unchanged chunk texts cost no embedding (the embedding cache).
- Idempotent and resumable: each item's upload and its SourceItem row are committed together, so a sync
  killed mid-way leaves every item either done or untouched; the next sync lists again, finds the finished
  ones unchanged, does the rest, and resends ingest jobs the dead worker left behind.
- Removals only after a complete listing (a crawl stopped by a limit removes nothing). A file moved between
  prefixes (same bytes, old key gone) keeps its document and chunks: only its name and department change. A
  department rule change moves chunks the same way.
- A failing item (unreadable, or refused by the parse sandbox) is recorded (SourceItem.error, a `failed`
  SourceChange) and the rest go on; its previous version, if any, stays searchable.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery import current_app as celery_app
from django.db import connections, transaction
from django.utils import timezone

from kb import access
from kb.ingest import TRANSIENT_ERRORS, UploadRejected, delete_document, enqueue_job, upload_document
from kb.ingest.documents import move_document
from kb.ingest.pipeline import group_max_jobs
from kb.metadata import text_problem
from kb.models import Corpus, Document, DocumentStatus, IngestJob, JobStatus
from kb.parse_sandbox import parse_document
from kb.parsing import ParseError, declared_type
from kb.sources.base import Entry, ItemError, Listing, SourceError, item_title
from kb.sources.crypto import SecretUnreadable, decrypt_secret
from kb.sources.kinds import open_listing
from kb.sources.models import ACTIVE_SYNC, Source, SourceChange, SourceItem, SourceSync, SyncStatus
from kb.sources.rules import department_for
from tenants.scope import NotAllowed, Scope, across_tenants, activate

logger = logging.getLogger(__name__)

def batch_items() -> int:
    """New or changed items committed together: the ingest group size (GROUNDED_INGEST_GROUP, 32)."""
    return group_max_jobs()


_LOCK_CLASS = 0x7372  # advisory-lock namespace for source syncs ("sr")
_BULK = 1000
STALE_QUEUED_SECONDS = 300  # a queued sync older than this lost its message: resent by the scheduler


def listing_for(source: Source) -> Listing:
    """The connector listing of `source` (credentials decrypted here, handed only to the connector), under its
    tenant's outbound policy. The grants are checked again first: a revoked grant fails the sync (SourceError)."""
    return open_listing(source.tenant_id, source.kind, source.config, decrypt_secret(source.secret))


def source_name_for_item(source: Source, key: str) -> str:
    """The document's source name: unique per source and key within the corpus."""
    return f"{source.kind}:{source.pk}:{key}"


# --- requesting ----------------------------------------------------------------------------------

def request_sync(*, scope: Scope, source: Source, trigger: str = SourceSync.Trigger.MANUAL) -> tuple[SourceSync, bool]:
    """Queue a sync of `source`, or join the one already queued or running; returns (sync, created).

    Raises NotAllowed for a paused source or a caller that may not manage it. The sync runs after
    commit (a worker; in this process when there is no broker)."""
    with activate(scope):
        locked = Source.objects.for_scope(scope).select_for_update().select_related("corpus").get(pk=source.pk)
        if scope.role != "system":
            access.check_may_manage_source(scope, locked.corpus, set())
        if locked.paused:
            raise NotAllowed("the source is paused: resume it first", field="paused")
        active = SourceSync.objects.for_scope(scope).filter(source=locked, status__in=ACTIVE_SYNC).order_by("-id").first()
        if active is not None and not (active.status == SyncStatus.RUNNING and not _lock_held_elsewhere(locked.pk)):
            return active, False
        if active is not None:  # running, but its worker died (the lock is free): the new sync resumes its work
            _mark_interrupted(scope, locked.pk)
        sync = SourceSync.objects.create(tenant_id=scope.tenant_id, source=locked, trigger=trigger, status=SyncStatus.QUEUED,
                                         stage="queued", requested_by=scope.principal[:200])
        if locked.schedule_minutes:
            Source.objects.for_scope(scope).filter(pk=locked.pk).update(
                next_sync_at=timezone.now() + timedelta(minutes=locked.schedule_minutes))
        enqueue_sync(sync.pk, scope.tenant_id)
        return sync, True


def enqueue_sync(sync_id: int, tenant_id: int) -> None:
    """Send the sync's task after commit; with no broker, run it in this process."""

    def send() -> None:
        if celery_app.conf.task_always_eager:
            try:
                run_sync(sync_id=sync_id, tenant_id=tenant_id)
            except TRANSIENT_ERRORS as exc:  # stays queued; the scheduler resends it
                logger.warning("source sync %s hit a transient error: %s", sync_id, type(exc).__name__)
        else:
            celery_app.send_task("kb.sync_source", args=[sync_id, tenant_id])

    transaction.on_commit(send, robust=True)


def schedule_due_sources(*, now: datetime | None = None, limit: int = 200) -> list[int]:
    """Queue a sync of every unpaused source whose schedule is due, and resend queued syncs whose
    message was lost. Across tenants: maintenance, owner connection (like the job reaper)."""
    now = now or timezone.now()
    with across_tenants("maintenance: the scheduler finds due sources of every tenant"):
        due = list(Source.objects.unscoped_dangerously(using="owner")
                   .filter(paused=False, schedule_minutes__gt=0)
                   .filter(next_sync_at__isnull=True).values_list("id", "tenant_id")[:limit])
        due += list(Source.objects.unscoped_dangerously(using="owner")
                    .filter(paused=False, schedule_minutes__gt=0, next_sync_at__lte=now).values_list("id", "tenant_id")[:limit])
    started = []
    for source_id, tenant_id in due:
        scope = Scope.system(tenant_id, principal="source-scheduler")
        with activate(scope):
            source = Source.objects.for_scope(scope).filter(pk=source_id).first()
        if source is None:
            continue
        try:
            sync, created = request_sync(scope=scope, source=source, trigger=SourceSync.Trigger.SCHEDULE)
        except NotAllowed:
            continue
        if created:
            started.append(sync.pk)
    with across_tenants("maintenance: the scheduler resends lost syncs of every tenant"):
        for sync_id, tenant_id in list(SourceSync.objects.unscoped_dangerously(using="owner").filter(
                status=SyncStatus.QUEUED, created_at__lt=now - timedelta(seconds=STALE_QUEUED_SECONDS))
                .values_list("id", "tenant_id")[:limit]):
            enqueue_sync(sync_id, tenant_id)
    return started


# --- running -------------------------------------------------------------------------------------

def _lock_key(source_id: int) -> int:
    return source_id % 2_147_483_647


def _take_lock(stack: contextlib.ExitStack, source_id: int) -> bool:
    conn = connections["default"]
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [_LOCK_CLASS, _lock_key(source_id)])
        held = bool(cur.fetchone()[0])
    if held:
        def release() -> None:
            with contextlib.suppress(Exception), conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [_LOCK_CLASS, _lock_key(source_id)])
        stack.callback(release)
    return held


def _lock_held_elsewhere(source_id: int) -> bool:
    """True when another database session holds the source's sync lock (a sync is really running).
    pg_locks lists every database's locks and advisory keys repeat across databases (another
    installation on the same server, another test database): only this database's count."""
    with connections["default"].cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s "
                    "AND objsubid = 2 AND granted AND pid <> pg_backend_pid() "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())", [_LOCK_CLASS, _lock_key(source_id)])
        return cur.fetchone()[0] > 0


def _mark_interrupted(scope: Scope, source_id: int, *, keep: int | None = None) -> None:
    now = timezone.now()
    with activate(scope):
        qs = SourceSync.objects.for_scope(scope).filter(source_id=source_id, status=SyncStatus.RUNNING)
        if keep is not None:
            qs = qs.exclude(pk=keep)
        qs.update(status=SyncStatus.INTERRUPTED, stage="interrupted", finished_at=now,
                  error="its worker stopped before the end; the next sync resumed the work")


def run_sync(*, sync_id: int, tenant_id: int) -> str:
    """Run one queued sync to the end. Returns "done", "failed", "busy" (another sync of the source
    holds the lock: a queued sync is refused) or "skipped" (already finished). Transient database
    errors put it back to queued and are re-raised for the task to retry."""
    scope = Scope.system(tenant_id, principal=f"source-sync:{sync_id}")
    with activate(scope):
        sync = SourceSync.objects.for_scope(scope).filter(pk=sync_id).first()
    if sync is None or sync.status not in ACTIVE_SYNC:
        return "skipped"
    with contextlib.ExitStack() as stack:
        if not _take_lock(stack, sync.source_id):
            if sync.status == SyncStatus.QUEUED:
                _finish(scope, sync.pk, SyncStatus.FAILED, error="refused: another sync of this source was running")
            return "busy"
        _mark_interrupted(scope, sync.source_id, keep=sync.pk)  # we hold the lock: any other "running" one is dead
        with activate(scope):
            source = Source.objects.for_scope(scope).select_related("corpus").filter(pk=sync.source_id).first()
            claimed = SourceSync.objects.for_scope(scope).filter(pk=sync.pk, status__in=ACTIVE_SYNC).update(
                status=SyncStatus.RUNNING, stage="list", started_at=timezone.now(), heartbeat_at=timezone.now())
        if source is None or not claimed:
            return "skipped"
        if source.paused:
            return _finish(scope, sync.pk, SyncStatus.FAILED, error="the source is paused")
        try:
            _Sync(scope, source, sync.pk).run()
        except (SourceError, SecretUnreadable) as exc:
            return _finish(scope, sync.pk, SyncStatus.FAILED, error=str(exc))
        except TRANSIENT_ERRORS as exc:
            with contextlib.suppress(Exception), activate(scope):
                SourceSync.objects.for_scope(scope).filter(pk=sync.pk).update(
                    status=SyncStatus.QUEUED, stage="retrying", error=f"{type(exc).__name__}"[:2000])
            raise
        except Exception as exc:
            logger.exception("source sync %s failed", sync_id)
            return _finish(scope, sync.pk, SyncStatus.FAILED, error=f"internal error: {type(exc).__name__}")
        return "done"


def _finish(scope: Scope, sync_id: int, status: str, *, error: str = "", **fields) -> str:
    now = timezone.now()
    with activate(scope):
        SourceSync.objects.for_scope(scope).filter(pk=sync_id).update(
            status=status, stage=status, error=error[:2000], finished_at=now, heartbeat_at=now, **fields)
        source_id = SourceSync.objects.for_scope(scope).filter(pk=sync_id).values_list("source_id", flat=True).first()
        if source_id:
            Source.objects.for_scope(scope).filter(pk=source_id).update(last_sync_id=sync_id)
    return status


@dataclass
class _Counts:
    seen: int = 0
    added: int = 0
    changed: int = 0
    moved: int = 0
    removed: int = 0
    unchanged: int = 0
    failed: int = 0

    def as_fields(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Deferred:
    """A new item whose bytes equal a present item not listed yet: a move, if that one is gone."""

    entry: Entry
    data: bytes
    sha: str
    department_id: int | None
    old_key: str


@dataclass
class _Sync:
    scope: Scope
    source: Source
    sync_id: int
    counts: _Counts = field(default_factory=_Counts)

    def run(self) -> None:
        self._batch: contextlib.ExitStack | None = None
        self._batched = 0
        try:
            self._run()
        except BaseException:
            if self._batch is not None:  # roll the open batch back: its items are redone by the next sync
                batch, self._batch = self._batch, None
                batch.__exit__(*sys.exc_info())
            raise

    def _run(self) -> None:
        self.corpus: Corpus = self.source.corpus
        self.started = timezone.now()
        self.last_beat = time.monotonic()
        with activate(self.scope):
            self.items = {i.key: i for i in SourceItem.objects.for_scope(self.scope).filter(source=self.source)}
            linked = {i.document_id for i in self.items.values() if i.document_id and i.state != SourceItem.State.REMOVED}
            alive = set(Document.objects.for_scope(self.scope).filter(pk__in=linked).values_list("pk", flat=True))
        for item in self.items.values():  # a document deleted by hand since: the item is ingested again (mirror)
            if item.state != SourceItem.State.REMOVED and item.document_id and item.document_id not in alive:
                item.document_id = None
        self.present_by_sha = {i.sha256: i for i in self.items.values()
                               if i.state == SourceItem.State.PRESENT and i.document_id and i.sha256}
        self.seen: set[str] = set()
        self.touched: list[str] = []  # listed items whose row needs only last_seen_sync_id
        deferred: list[_Deferred] = []
        listing = listing_for(self.source)
        for entry in listing:
            if entry.key in self.seen:
                continue
            if len(entry.key) > 1000 or text_problem(entry.key):  # cannot be stored, so cannot be tracked: skipped
                self.counts.failed += 1
                continue
            self.seen.add(entry.key)
            self.counts.seen += 1
            if (moved := self._item(entry)) is not None:
                deferred.append(moved)
            self._beat()
        self._commit_batch()
        self._flush_touched()
        complete = bool(listing.complete)
        self._stage("apply")
        for d in deferred:
            old = self.items.get(d.old_key)
            if complete and d.old_key not in self.seen and old is not None and old.state == SourceItem.State.PRESENT:
                self._move(d, old)
            else:
                self._ingest(d.entry, d.data, d.sha, d.department_id, self.items.get(d.entry.key))
        self._commit_batch()
        if complete:
            self._remove_gone()
        self._resume_unfinished()
        _finish(self.scope, self.sync_id, SyncStatus.DONE, complete_listing=complete, **self.counts.as_fields())

    # one listed item
    def _item(self, entry: Entry) -> _Deferred | None:
        item = self.items.get(entry.key)
        dept = department_for(entry.key, self.source.department_rules or [], self.corpus.department_id)
        if entry.error:
            self._failed(entry.key, item, entry.error, dept)
            return None
        live = item if item is not None and item.state == SourceItem.State.PRESENT and item.document_id is not None else None
        if live is not None and entry.signature and live.signature == entry.signature:
            self._keep(live, dept)
            return None
        try:
            data = entry.fetch()
        except ItemError as exc:
            self._failed(entry.key, item, str(exc), dept)
            return None
        sha = hashlib.sha256(data).hexdigest()
        if live is not None and live.sha256 == sha:  # touched upstream, same bytes: nothing to ingest
            self._keep(live, dept, signature=entry.signature)
            return None
        if live is None and (old := self.present_by_sha.get(sha)) is not None and old.key not in self.seen and old.key != entry.key:
            return _Deferred(entry, data, sha, dept, old.key)
        self._ingest(entry, data, sha, dept, item)
        return None

    def _keep(self, item: SourceItem, dept: int | None, signature: str | None = None) -> None:
        if dept != item.department_id:
            self._move_department(item, dept, signature=signature)
        elif signature is not None:
            with activate(self.scope):
                SourceItem.objects.for_scope(self.scope).filter(pk=item.pk).update(
                    signature=signature[:200], last_seen_sync_id=self.sync_id, error="")
            self.counts.unchanged += 1
        else:
            self.touched.append(item.key)
            self.counts.unchanged += 1

    def _move_department(self, item: SourceItem, dept: int | None, *, new_key: str | None = None,
                         signature: str | None = None) -> None:
        with activate(self.scope):
            doc = Document.objects.for_scope(self.scope).filter(pk=item.document_id).first()
            if doc is None:
                return
            name = source_name_for_item(self.source, new_key) if new_key else None
            move_document(scope=self.scope, document=doc, department_id=dept, source_name=name)
            fields = {"department_id": dept, "last_seen_sync_id": self.sync_id, "changed_by_sync_id": self.sync_id, "error": ""}
            if new_key:
                SourceItem.objects.for_scope(self.scope).filter(source=self.source, key=new_key).delete()
                fields["key"] = new_key
            if signature is not None:
                fields["signature"] = signature[:200]
            SourceItem.objects.for_scope(self.scope).filter(pk=item.pk).update(**fields)
            self._log(new_key or item.key, SourceChange.Action.MOVED, doc.pk, doc.version, dept,
                      error=f"moved from {item.key}" if new_key else "")
        self.counts.moved += 1

    def _move(self, d: _Deferred, old: SourceItem) -> None:
        self._move_department(old, d.department_id, new_key=d.entry.key, signature=d.entry.signature)
        old.state = SourceItem.State.REMOVED  # its document now belongs to the new key
        self.seen.add(old.key)

    def _ingest(self, entry: Entry, data: bytes, sha: str, dept: int | None, item: SourceItem | None) -> None:
        name = source_name_for_item(self.source, entry.key)
        if len(name) > 500:
            self._failed(entry.key, item, "the item's name is longer than 500 characters", dept)
            return
        try:  # checked here so a corrupt new version never replaces a good old one
            mime = declared_type(name, data, entry.mime_type) if entry.mime_type else None
            parsed = parse_document(data, name, mime)  # under the worker's parse limits, in a child process
        except ParseError as exc:
            self._failed(entry.key, item, f"parse error: {exc}", dept)
            return
        self._open_batch()
        try:
            with activate(self.scope):
                existing = Document.objects.for_scope(self.scope).filter(corpus=self.corpus, source_name=name).first()
                if existing is not None and existing.department_id != dept:
                    move_document(scope=self.scope, document=existing, department_id=dept)
                doc, job = upload_document(scope=self.scope, corpus=self.corpus, filename=name, data=data,
                                           department_id=dept, mime_type=mime, title=item_title(parsed.title, name, entry.key))
                action = SourceChange.Action.ADDED if existing is None else SourceChange.Action.CHANGED
                values = {"document_id": doc.pk, "department_id": dept, "signature": entry.signature[:200], "sha256": sha,
                          "size_bytes": len(data), "state": SourceItem.State.PRESENT, "error": "",
                          "last_seen_sync_id": self.sync_id, "changed_by_sync_id": self.sync_id}
                SourceItem.objects.for_scope(self.scope).update_or_create(
                    source=self.source, key=entry.key, defaults=values, create_defaults={**values, "tenant_id": self.scope.tenant_id})
                self._log(entry.key, action, doc.pk, doc.version, dept)
        except UploadRejected as exc:
            self._failed(entry.key, item, exc.message, dept)
            return
        if action == SourceChange.Action.ADDED:
            self.counts.added += 1
        else:
            self.counts.changed += 1
        self._batched += 1
        if self._batched >= batch_items():
            self._commit_batch()

    def _open_batch(self) -> None:
        """New and changed items are committed in batches (one transaction, a savepoint per item), so
        their ingest jobs start together and embed in full batches (kb.ingest.pipeline groups queued
        jobs of a corpus); a sync killed mid-batch loses only that batch, which the next sync redoes."""
        if self._batch is None:
            self._batch = contextlib.ExitStack()
            self._batch.enter_context(transaction.atomic())

    def _commit_batch(self) -> None:
        if self._batch is not None:
            batch, self._batch, self._batched = self._batch, None, 0
            batch.close()  # commits: the batch's ingest jobs run (no broker) or are sent

    def _failed(self, key: str, item: SourceItem | None, reason: str, dept: int | None) -> None:
        """Record the failure; an item seen before keeps its document (and is not taken as removed)."""
        with activate(self.scope):
            if item is not None and item.state != SourceItem.State.REMOVED:
                SourceItem.objects.for_scope(self.scope).filter(pk=item.pk).update(
                    error=reason[:2000], last_seen_sync_id=self.sync_id,
                    state=SourceItem.State.PRESENT if item.document_id else SourceItem.State.FAILED)
            else:
                values = {"state": SourceItem.State.FAILED, "error": reason[:2000], "department_id": dept,
                          "last_seen_sync_id": self.sync_id, "document_id": None, "signature": "", "sha256": ""}
                SourceItem.objects.for_scope(self.scope).update_or_create(
                    source=self.source, key=key, defaults=values, create_defaults={**values, "tenant_id": self.scope.tenant_id})
            self._log(key, SourceChange.Action.FAILED, item.document_id if item else None, None, dept, error=reason)
        self.counts.failed += 1

    def _remove_gone(self) -> None:
        self._stage("remove")
        gone = [i for k, i in self.items.items() if k not in self.seen and i.state != SourceItem.State.REMOVED]
        for item in gone:
            with activate(self.scope):
                doc = Document.objects.for_scope(self.scope).filter(pk=item.document_id).first() if item.document_id else None
                version = doc.version if doc else None
                if doc is not None:
                    delete_document(scope=self.scope, document=doc)
                SourceItem.objects.for_scope(self.scope).filter(pk=item.pk).update(
                    state=SourceItem.State.REMOVED, changed_by_sync_id=self.sync_id, error="")
                if item.state == SourceItem.State.PRESENT:
                    self._log(item.key, SourceChange.Action.REMOVED, item.document_id, version, item.department_id)
                    self.counts.removed += 1
            self._beat()

    def _resume_unfinished(self) -> None:
        """Resend ingest jobs of this source's documents that a dead worker left queued or running
        (resending is safe: a live job holds its lease and the duplicate returns "busy")."""
        with activate(self.scope):
            doc_ids = SourceItem.objects.for_scope(self.scope).filter(
                source=self.source, state=SourceItem.State.PRESENT, document_id__isnull=False).values("document_id")
            stuck = list(IngestJob.objects.for_scope(self.scope).filter(
                document_id__in=doc_ids, document__status__in=[DocumentStatus.PENDING, DocumentStatus.PROCESSING],
                status__in=[JobStatus.QUEUED, JobStatus.RUNNING], created_at__lt=self.started).values_list("pk", "kind"))
            for pk, kind in stuck:
                enqueue_job(pk, self.scope.tenant_id, kind)

    def _flush_touched(self) -> None:
        for i in range(0, len(self.touched), _BULK):
            with activate(self.scope):
                SourceItem.objects.for_scope(self.scope).filter(source=self.source, key__in=self.touched[i:i + _BULK]).update(
                    last_seen_sync_id=self.sync_id)
        self.touched = []

    def _log(self, key: str, action: str, document_id: int | None, version: int | None, dept: int | None, error: str = "") -> None:
        SourceChange.objects.create(tenant_id=self.scope.tenant_id, sync_id=self.sync_id, key=key[:1000], action=action,
                                    document_id=document_id, document_version=version, department_id=dept, error=error[:2000])

    def _stage(self, stage: str) -> None:
        with activate(self.scope):
            SourceSync.objects.for_scope(self.scope).filter(pk=self.sync_id).update(
                stage=stage, heartbeat_at=timezone.now(), **self.counts.as_fields())

    def _beat(self) -> None:
        if time.monotonic() - self.last_beat >= 1.0:
            self.last_beat = time.monotonic()
            self._flush_touched()
            self._stage("sync")

