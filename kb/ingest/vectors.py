"""Embedding I/O of the write path: the per-tenant embedding cache (binary float32 over the wire) and
embedding texts in batches through it."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
from django.db import connections
from django.utils import timezone
from pgvector.psycopg.vector import VectorBinaryDumper, VectorBinaryLoader, VectorDumper
from psycopg.types import TypeInfo

from kb.embedding import Embedder, embed_windowed
from kb.ingest.jobs import running_jobs
from kb.models import EmbeddingCache, IngestJob
from kb.vector_index import HALFVEC_MAX_DIM, ensure_vector_index
from tenants.conf import product_settings
from tenants.scope import Scope, activate


def embed_batch_size() -> int:
    return product_settings.GROUNDED_EMBED_BATCH


PROGRESS_STEPS = 4  # a job's progress moves about this many times while it embeds...
# ...in batches of at least this many texts: smaller batches embed markedly slower per text
# (figures: docs/ingestion.md, "Figures behind rules in the code").
MIN_PROGRESS_BATCH = 16


def progress_batch_size(missing: int) -> int:
    """Texts per embedding call when jobs report progress: GROUNDED_EMBED_BATCH at most, and small
    enough that a single document's progress moves while it embeds (61 chunks: 4 batches of 16,
    not one of 61 that jumps from 0 to done); groups of 256 texts and more keep full batches."""
    return min(embed_batch_size(), max(MIN_PROGRESS_BATCH, math.ceil(missing / PROGRESS_STEPS)))


def ensure_index_outside_transactions(model_key: str, dim: int) -> None:
    """Make sure the vector index of `model_key` exists (kb.vector_index.ensure_vector_index) before a job
    writes vectors of that model; skipped for vectors too wide to index, and when this thread holds an
    open transaction (the build could wait on our own locks: the next job outside one builds it)."""
    if dim <= HALFVEC_MAX_DIM and not connections["default"].in_atomic_block and not connections["owner"].in_atomic_block:
        ensure_vector_index(model_key, dim)


def vectors_for(scope: Scope, embedder: Embedder, texts: dict[str, str], progress: dict[int, list[str]] | None = None,
                owners: dict[int, list[str]] | None = None) -> dict[str, np.ndarray]:
    """sha256 -> vector for every text ({sha256: text}): cache first, then the embedder in batches of
    texts of similar length (shortest first: a batch is padded to its longest text, so batches cut
    from document order, where a 5-word sentence sits beside a 60-word one, cost about twice the
    model time; docs/ingestion.md, "Figures behind rules in the code"), each batch written to the
    cache and committed together with the progress of the jobs (`progress`: job id -> its chunks'
    hashes) whose chunks it completed (batches of `progress_batch_size`, so that progress moves).

    Cancellation checkpoint: with `progress` or `owners` (job id -> the hashes it needs), the jobs are
    checked before each batch (kb.ingest.jobs.running_jobs); a text only cancelled jobs needed is not
    embedded, so a deleted document stops costing model time within one batch. The result then lacks
    those texts: callers keep only the jobs still running."""
    owners = owners if owners is not None else progress
    with activate(scope):
        vectors = _cache_lookup(scope, embedder.model_key, list(texts))
    missing = sorted((h for h in texts if h not in vectors), key=lambda h: len(texts[h]))
    users: dict[str, list[int]] = {}
    done: dict[int, int] = {}
    now = timezone.now()
    if progress:
        with activate(scope):
            for job_id, hashes in progress.items():
                done[job_id] = sum(1 for h in hashes if h in vectors)
                for h in hashes:
                    users.setdefault(h, []).append(job_id)
                IngestJob.objects.for_scope(scope).filter(pk=job_id).update(
                    stage="embed", chunks_total=len(hashes), chunks_done=done[job_id], heartbeat_at=now)
    size = progress_batch_size(len(missing)) if progress else embed_batch_size()
    live = set(owners or ())
    start = 0
    while start < len(missing):
        if owners and (gone := live - running_jobs(scope, live)):
            live -= gone
            wanted = {h for job_id in live for h in owners[job_id]}
            missing = missing[:start] + [h for h in missing[start:] if h in wanted]
            continue
        batch = missing[start:start + size]
        start += size
        array = embed_windowed(embedder, [texts[h] for h in batch], "document")
        if array.shape != (len(batch), embedder.dim) or not np.isfinite(array).all():
            raise ValueError(f"embedder {embedder.model_key} returned {array.shape} for {len(batch)} texts")
        array = np.ascontiguousarray(array, dtype=np.float32)
        touched = {job_id for h in batch for job_id in users.get(h, ())}
        with activate(scope):
            _cache_store(scope, embedder.model_key, batch, array)
            for h in batch:
                for job_id in users.get(h, ()):
                    done[job_id] += 1
            now = timezone.now()
            for job_id in touched:
                IngestJob.objects.for_scope(scope).filter(pk=job_id).update(chunks_done=done[job_id], heartbeat_at=now)
            if progress:  # the group's other jobs are alive too (the reaper watches heartbeats)
                IngestJob.objects.for_scope(scope).filter(pk__in=list(progress)).exclude(pk__in=touched).update(heartbeat_at=now)
        vectors.update(zip(batch, array, strict=True))
    return vectors


@contextlib.contextmanager
def vector_cursor(alias: str = "default") -> Iterator[Any]:
    """A raw psycopg cursor on the Django connection (same transaction), with binary numpy<->vector
    adapters registered on this cursor only (the ORM's own vector handling is left untouched)."""
    conn = connections[alias]
    conn.ensure_connection()
    raw = conn.connection
    info = getattr(raw, "_grounded_vector_info", None)
    if info is None:
        info = TypeInfo.fetch(raw, "vector")
        raw._grounded_vector_info = info

    # A server-side-binding cursor: Django's default ClientCursor cannot carry binary parameters or results.
    with psycopg.Cursor(raw) as cur:
        info.register(cur)
        cur.adapters.register_dumper(np.ndarray, type("VectorText", (VectorDumper,), {"oid": info.oid}))
        cur.adapters.register_dumper(np.ndarray, type("VectorBinary", (VectorBinaryDumper,), {"oid": info.oid}))
        cur.adapters.register_loader(info.oid, VectorBinaryLoader)
        yield cur


def _cache_lookup(scope: Scope, model_key: str, hashes: list[str]) -> dict[str, np.ndarray]:
    if not hashes:
        return {}
    with vector_cursor() as cur:
        cur.execute("SELECT text_sha256, embedding FROM kb_embeddingcache "
                    "WHERE tenant_id = %s AND model_key = %s AND text_sha256 = ANY(%s)",
                    [scope.tenant_id, model_key, hashes], binary=True)
        return {h: v.to_numpy() for h, v in cur.fetchall()}


def _cache_store(scope: Scope, model_key: str, hashes: list[str], array: np.ndarray) -> None:
    with vector_cursor() as cur:
        cur.execute("INSERT INTO kb_embeddingcache (tenant_id, model_key, text_sha256, embedding, created_at) "
                    "SELECT %s, %s, u.h, u.e, now() FROM unnest(%s::text[], %b::vector[]) AS u(h, e) "
                    "ON CONFLICT (tenant_id, model_key, text_sha256) DO NOTHING",
                    [scope.tenant_id, model_key, hashes, list(array)])


def embedding_cache_size(*, scope: Scope, model_key: str) -> int:
    with activate(scope):
        return EmbeddingCache.objects.for_scope(scope).filter(model_key=model_key).count()

