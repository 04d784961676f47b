"""Sources: where a corpus's documents live (a folder, an S3-compatible bucket, a website), what a
sync saw there, and what each sync changed. Imported by kb.models (app label "kb").

Every row carries its tenant (kb.model_bases.TenantRow) and sits behind row-level security (kb migration 0008). A source has
no department of its own: it is visible through its corpus, and its mapping rules say which
department each item's document goes to.
"""

from __future__ import annotations

from django.db import models

from kb.model_bases import BackgroundJob, TenantRow
from tenants.models import Department


class SourceKind(models.TextChoices):
    FOLDER = "folder"
    S3 = "s3"
    WEBSITE = "website"


class SyncStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # its worker died; the next sync picks up where it stopped


ACTIVE_SYNC = (SyncStatus.QUEUED, SyncStatus.RUNNING)


class Source(TenantRow):
    """One place a corpus follows. `config` holds no secret; credentials live only in `secret`,
    Fernet-encrypted (kb.sources.crypto), written once and never shown again."""

    # "kb.Corpus" by name: kb.models imports this module. Keys between tenant tables: see kb.models.
    corpus = models.ForeignKey("kb.Corpus", on_delete=models.CASCADE, related_name="sources", db_constraint=False)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=SourceKind.choices)
    config = models.JSONField(default=dict, blank=True, help_text="Where and how to read (no secrets): see docs/sources.md.")
    secret = models.TextField(blank=True, editable=False, help_text="Encrypted credentials (never shown).")
    department_rules = models.JSONField(
        default=list, blank=True,
        help_text='Item prefix -> department, longest prefix first: [{"prefix": "hr/", "department": 3}, '
                  '{"prefix": "public/", "department": null}]. null: tenant-wide. No match: the corpus\'s department.')
    schedule_minutes = models.PositiveIntegerField(default=60, help_text="Minutes between scheduled syncs; 0: only on demand.")
    paused = models.BooleanField(default=False, help_text="A paused source is not synced, on schedule or on demand.")
    next_sync_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # NO ACTION in the database (kb 0011: Citus refuses ON DELETE SET NULL on a tenant-keyed key): Django nulls it.
    last_sync = models.ForeignKey("SourceSync", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                  db_constraint=False)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="uniq_source_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def has_secret(self) -> bool:
        return bool(self.secret)


class SourceSync(BackgroundJob):
    """One sync of a source: its status, progress and summary."""

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        MANUAL = "manual"

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="syncs", db_constraint=False)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.MANUAL)
    requested_by = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=SyncStatus.choices, default=SyncStatus.QUEUED)
    stage = models.CharField(max_length=32, blank=True)
    seen = models.PositiveIntegerField(default=0)
    added = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    moved = models.PositiveIntegerField(default=0, help_text="Items whose department (or key) changed, chunks kept.")
    removed = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    complete_listing = models.BooleanField(default=False, help_text="Every item upstream was seen (removals applied).")
    # tenant, error, created_at, started_at, heartbeat_at, finished_at and `objects`: BackgroundJob.

    class Meta:
        indexes = [models.Index(fields=["source", "status"])]

    def __str__(self) -> str:
        return f"sync {self.pk} of source {self.source_id} ({self.status})"

    @property
    def seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None


class SourceItem(TenantRow):
    """What the last sync saw of one upstream item, and the document it feeds."""

    class State(models.TextChoices):
        PRESENT = "present"
        FAILED = "failed"  # the last attempt failed; the previous version (if any) stays searchable
        REMOVED = "removed"  # gone upstream: its document was deleted (audit rows keep what was cited)

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="items", db_constraint=False)
    key = models.CharField(max_length=1000, help_text="Relative path, object key or URL.")
    # Plain integer, not a foreign key: the item outlives its document for audit.
    document_id = models.BigIntegerField(null=True, blank=True)
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                   db_constraint=False)
    signature = models.CharField(max_length=200, blank=True, help_text="ETag, size+mtime or content hash upstream.")
    sha256 = models.CharField(max_length=64, blank=True)
    size_bytes = models.PositiveBigIntegerField(default=0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PRESENT)
    error = models.TextField(blank=True)
    last_seen_sync_id = models.BigIntegerField(null=True, blank=True)
    changed_by_sync_id = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "source", "key"], name="uniq_source_item_key")]

    def __str__(self) -> str:
        return self.key


class SourceChange(TenantRow):
    """Append-only log of what a sync did to which item: which sync produced a document version."""

    class Action(models.TextChoices):
        ADDED = "added"
        CHANGED = "changed"
        MOVED = "moved"
        REMOVED = "removed"
        FAILED = "failed"

    sync = models.ForeignKey(SourceSync, on_delete=models.CASCADE, related_name="changes", db_constraint=False)
    key = models.CharField(max_length=1000)
    action = models.CharField(max_length=16, choices=Action.choices)
    document_id = models.BigIntegerField(null=True, blank=True)
    document_version = models.PositiveIntegerField(null=True, blank=True)
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                   db_constraint=False)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "document_id", "document_version"], name="source_change_doc_idx")]


class SourceGrant(TenantRow):
    """What an operator allows one tenant's sources to read: a folder (under SOURCES_FOLDER_ROOTS, never
    overlapping another tenant's folder grant: the database refuses it, kb migration 0009), a website
    host or an S3 endpoint (host[:port]). Written only through the owner connection
    (kb.sources.grants, `manage.py grant_source`); the application role may only read its own tenant's."""

    class Kind(models.TextChoices):
        FOLDER = "folder"
        WEBSITE_HOST = "website_host"
        S3_ENDPOINT = "s3_endpoint"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    value = models.CharField(max_length=1000, help_text="folder: its real path; website_host: host; s3_endpoint: host[:port].")
    allow_private = models.BooleanField(default=False, help_text="Hosts only: private addresses allowed for this host.")
    note = models.CharField(max_length=500, blank=True)
    granted_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "kind", "value"], name="uniq_source_grant")]

    def __str__(self) -> str:
        return f"{self.kind} {self.value}"
