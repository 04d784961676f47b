"""Ingestion services: upload, the ingest job (parse -> chunk -> embed -> write), reaper, re-embed.

Guarantees:
- A job is run by one worker at a time: a session advisory lock on the job id is the lease, and it
  dies with the worker's database session (a SIGKILLed worker frees it at once).
- Re-running or re-delivering a job never duplicates anything: a document's chunks are replaced
  in ONE transaction (delete + insert), so readers see the old set or the new, never a mix.
- Vectors are staged per batch in the EmbeddingCache (tenant, model key, sha256 of chunk text),
  committed with the job's progress: a crashed job resumes without re-embedding finished batches,
  and unchanged text is never embedded twice, across documents, re-ingests and re-embeds.
- Deleting a document cancels its ingest (its job rows go with it): a queued job does nothing, a
  running one stops at its next checkpoint (its parse killed, or before the next embedding batch).
- Parsing runs in a child process bounded in wall time and memory from outside (kb.parse_sandbox).
- Every read and write of tenant data runs inside `activate(scope)` (RLS). Only the reaper reads
  across tenants, through the named owner escape hatch.

Raw SQL here (not in retrieval) is the write path: chunk rows are inserted with unnest() over binary
arrays (one round trip per document) so `search_vector` is computed by PostgreSQL in the same
statement, and vectors cross the wire as binary float32, never as text.

The package, one job per module: `documents` (upload, re-ingest, delete), `queue` (sending jobs, the
reaper), `jobs` (lease and bookkeeping), `pipeline` (the ingest job), `reembed`, `vectors` (embedding
cache I/O), `corpora` (a corpus's declarations: checks, and the recomputation when its date key or
language changes), `dates` (a document's date from its metadata).
"""

from kb.ingest.documents import UploadRejected, content_hash, delete_document, reingest_document, source_name_for, upload_document
from kb.ingest.jobs import MAX_ATTEMPTS, TRANSIENT_ERRORS
from kb.ingest.pipeline import group_max_jobs, run_ingest_job
from kb.ingest.queue import enqueue_job, resume_stuck_jobs
from kb.ingest.reembed import run_reembed_job, start_reembed
from kb.ingest.vectors import embed_batch_size, embedding_cache_size

__all__ = ["MAX_ATTEMPTS", "TRANSIENT_ERRORS", "UploadRejected", "content_hash", "delete_document", "embed_batch_size",
           "embedding_cache_size", "enqueue_job", "group_max_jobs", "reingest_document", "resume_stuck_jobs", "run_ingest_job",
           "run_reembed_job", "source_name_for", "start_reembed", "upload_document"]
