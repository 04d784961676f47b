"""Corpora, documents and chunks. Every row carries its tenant; chunks also carry department,
corpus and document so a search filters on one table.

Vectors of different models are never compared: `Chunk.embedding` is an untyped pgvector `halfvec`
column (2-byte floats: half the bytes of `vector`, recall measured in docs/scaling.md) tagged with
`embedding_model`, and each model gets its own partial expression HNSW index
(`embedding::halfvec(dim)` WHERE embedding_model = key), created by kb.vector_index.

Keyed by tenant in the database (kb 0011, tenants.tenant_keys): every table's primary key is
(tenant_id, id) and every unique constraint starts with the tenant; the foreign keys between these tables
are `db_constraint=False` here and (tenant_id, x_id) -> (tenant_id, id) in the database. Django's
`on_delete` still runs in Python.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from pgvector.django import HalfVectorField, VectorField

from kb.model_bases import BackgroundJob
from tenants.models import Department, Tenant
from tenants.scope import TenantScopedManager
from tenants.tenant_models import TenantModel

DEFAULT_EMBEDDING_MODEL = "minilm-l6-v2"
DEFAULT_EMBEDDING_DIM = 384
DEFAULT_CHUNK_TARGET_TOKENS = 240
DEFAULT_LANGUAGE = "english"


class Corpus(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                   db_constraint=False, help_text="Empty: visible to the whole tenant.")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    embedding_model = models.CharField(max_length=100, default=DEFAULT_EMBEDDING_MODEL)
    embedding_dim = models.PositiveIntegerField(default=DEFAULT_EMBEDDING_DIM)
    # Set while a background re-embed into another model runs; searches keep using the old one.
    next_embedding_model = models.CharField(max_length=100, blank=True)
    next_embedding_dim = models.PositiveIntegerField(null=True, blank=True)
    # Near the default model's input limit (MiniLM: 254 counted tokens): larger chunks held more of
    # a multi-hop question's facts in the same 10 chunks of context (docs/evaluation.md).
    chunk_target_tokens = models.PositiveIntegerField(default=DEFAULT_CHUNK_TARGET_TOKENS)
    chunk_overlap_tokens = models.PositiveIntegerField(default=30)
    sentence_vectors = models.BooleanField(
        default=False, help_text="Also embed every sentence of every chunk, so searches can re-rank candidates by their "
                                 "best-matching sentences (more precise; about doubles embedding work). Applies to "
                                 "documents ingested after it is set.")
    # What a corpus declares about its documents (kb.metadata's facets, kb.retrieval, ingestion read these).
    date_key = models.CharField(
        max_length=100, blank=True,
        help_text="Metadata key holding the date of each document (e.g. effective_date). Empty: undated.")
    facet_keys = models.JSONField(
        default=list, blank=True,
        help_text='Metadata keys whose values are enumerations, e.g. ["source", "category"]. Empty: '
                  "discovered from the documents.")
    language = models.CharField(
        max_length=40, default=DEFAULT_LANGUAGE,
        help_text="PostgreSQL text search configuration for keyword search (english, french, german, simple, ...).")
    chunk_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    # Not a column: the visible documents' count, set by the API's corpus views (annotation or count) for display.
    document_count: int

    objects = TenantScopedManager()

    class Meta:
        verbose_name_plural = "corpora"
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="uniq_corpus_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def model_key(self) -> str:
        return f"{self.embedding_model}:{self.embedding_dim}"


class DocumentStatus(models.TextChoices):
    PENDING = "pending"
    PROCESSING = "processing"
    READY = "ready"
    FAILED = "failed"


class Document(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                   db_constraint=False)
    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="documents", db_constraint=False)
    title = models.CharField(max_length=500)
    source_name = models.CharField(max_length=500, help_text="File name or origin the document came from.")
    mime_type = models.CharField(max_length=100)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveBigIntegerField(default=0)
    status = models.CharField(max_length=16, choices=DocumentStatus.choices, default=DocumentStatus.PENDING)
    error = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # metadata[corpus.date_key] parsed (kb.ingest.dates); null when undated or unparseable.
    dated_at = models.DateTimeField(null=True, blank=True, db_index=True)
    version = models.PositiveIntegerField(default=1)
    chunk_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "corpus", "source_name"], name="uniq_document_source"),
        ]
        indexes = [models.Index(fields=["tenant", "corpus", "status"])]

    def __str__(self) -> str:
        return self.title


class DocumentContent(TenantModel):
    """The uploaded bytes, kept so a document can be re-ingested and a crashed job resumed."""

    document = models.OneToOneField(Document, on_delete=models.CASCADE, primary_key=True, related_name="content",
                                    db_constraint=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    data = models.BinaryField()

    objects = TenantScopedManager()


class Chunk(TenantModel):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                   db_constraint=False)
    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="+", db_constraint=False)
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks", db_constraint=False)
    ordinal = models.PositiveIntegerField()
    text = models.TextField()
    locator = models.CharField(max_length=1000, blank=True, help_text="Heading path or page, e.g. 'Travel > Hotels'.")
    page = models.PositiveIntegerField(null=True, blank=True)
    char_start = models.PositiveIntegerField()
    char_end = models.PositiveIntegerField()
    token_count = models.PositiveIntegerField(default=0)
    content_hash = models.CharField(max_length=64)
    embedding = HalfVectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=120, blank=True)
    search_vector = SearchVectorField(null=True, editable=False)
    # Ingest-time findings, e.g. ["instructions_to_model"] from the injection detector.
    flags = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "document", "ordinal"], name="uniq_chunk_ordinal")]
        indexes = [
            models.Index(fields=["tenant", "department", "embedding_model"], name="chunk_scope_idx"),
            models.Index(fields=["corpus", "embedding_model"], name="chunk_corpus_idx"),
            GinIndex(fields=["search_vector"], name="chunk_fts_idx"),
        ]

    def __str__(self) -> str:
        return f"chunk {self.pk} (part {self.ordinal + 1} of document {self.document_id})"


class ChunkSentence(TenantModel):
    """One sentence's vector of a chunk (kb.sentences), for corpora with `sentence_vectors` on.

    Written with its chunk; the foreign key is ON DELETE CASCADE in the database (migration
    kb 0004; (tenant_id, chunk_id) since kb 0011), so every raw delete or rewrite of chunks takes their
    sentences along.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    # The (chunk, ordinal) unique index serves lookups by chunk.
    chunk = models.ForeignKey(Chunk, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                              related_name="sentences")
    ordinal = models.PositiveIntegerField()
    char_start = models.PositiveIntegerField(help_text="Offset in the chunk's text.")
    char_end = models.PositiveIntegerField()
    embedding = HalfVectorField()
    embedding_model = models.CharField(max_length=120)
    # The sentence's lexemes under the same text search configuration as Chunk.search_vector, so a
    # re-rank can see which query terms one sentence holds together (computed once, at insert).
    lexemes = ArrayField(models.TextField(), default=list, blank=True)

    objects = TenantScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "chunk", "ordinal"], name="uniq_chunk_sentence_ordinal")]


class EmbeddingCache(TenantModel):
    """Vectors by (model, dimension, sha256 of text), so unchanged text is never embedded twice.

    Per tenant, so one tenant's ingest timing reveals nothing about another's texts. Kept as
    float4 `vector` (unlike chunk and sentence vectors): it is the model's exact output, read back
    whole by key and never searched or indexed, so a later change of storage (or a model compared
    in full precision) can start from it without re-embedding.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    model_key = models.CharField(max_length=120)
    text_sha256 = models.CharField(max_length=64)
    embedding = VectorField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "model_key", "text_sha256"], name="uniq_embedding_cache")]


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class IngestJob(BackgroundJob):
    """One unit of background work with its progress, readable by API and admin."""

    class Kind(models.TextChoices):
        INGEST = "ingest"
        REEMBED = "reembed"

    corpus = models.ForeignKey(Corpus, on_delete=models.CASCADE, related_name="jobs", db_constraint=False)
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.CASCADE, related_name="jobs",
                                 db_constraint=False)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INGEST)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    stage = models.CharField(max_length=32, blank=True)
    chunks_total = models.PositiveIntegerField(default=0)
    chunks_done = models.PositiveIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    # tenant, error, created_at, started_at, heartbeat_at, finished_at and `objects`: BackgroundJob.

    class Meta:
        indexes = [models.Index(fields=["status", "heartbeat_at"])]

    def __str__(self) -> str:
        return f"{self.kind} job {self.pk} ({self.status})"


# Sources live in their own module; imported here so the app registry sees them.
from kb.sources.models import Source, SourceChange, SourceItem, SourceSync  # noqa: E402,F401
