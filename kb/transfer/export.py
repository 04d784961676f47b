"""Writing a corpus to its file (kb.transfer.fileformat), and the corpus's records as the file holds them.

The records are read in one transaction under the caller's scope (RLS), a page of documents at a
time; chunk and sentence vectors are read as the stored halfvec values (binary, never as text).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from django.utils import timezone

from kb import access
from kb.ingest.vectors import vector_cursor
from kb.models import Corpus, DocumentContent, DocumentStatus
from kb.transfer.fileformat import FORMAT, VECTOR_DTYPE, VERSION, canonical_line, encode_vector
from tenants.scope import Scope, activate

DOCUMENT_PAGE = 200


class ExportRefused(ValueError):
    """The corpus cannot be exported now (ingestion or a re-embed is running); the message says which."""


@dataclass(frozen=True)
class ExportSummary:
    documents: int
    chunks: int
    sentences: int
    skipped_failed: int
    sha256: str
    model_key: str


def corpus_settings(corpus: Corpus) -> dict:
    """What the file carries of the corpus itself (never its tenant, department or ids)."""
    return {"name": corpus.name, "description": corpus.description, "language": corpus.language,
            "chunk_target_tokens": corpus.chunk_target_tokens, "chunk_overlap_tokens": corpus.chunk_overlap_tokens,
            "sentence_vectors": corpus.sentence_vectors, "date_key": corpus.date_key, "facet_keys": list(corpus.facet_keys)}


def export_corpus(*, scope: Scope, corpus: Corpus, out: IO[bytes], include_bytes: bool = True) -> ExportSummary:
    """Write `corpus` (visible to `scope`, which may change it) to `out` as a corpus file: its ready
    documents (with their original bytes unless `include_bytes` is false), chunks, sentence vectors
    and embeddings. Failed documents are left out (counted in the summary); a corpus still ingesting
    or being re-embedded is refused (ExportRefused), so the file is one consistent state."""
    access.check_may_export_corpus(scope, corpus)
    with activate(scope):
        corpus = Corpus.objects.for_scope(scope).get(pk=corpus.pk)
        if corpus.next_embedding_model:
            raise ExportRefused(f"corpus {corpus.name!r} is being re-embedded into {corpus.next_embedding_model}; "
                                "export it when the re-embed job is done")
        documents = access.visible_documents(scope).filter(corpus_id=corpus.pk)
        busy = documents.filter(status__in=[DocumentStatus.PENDING, DocumentStatus.PROCESSING]).count()
        if busy:
            raise ExportRefused(f"corpus {corpus.name!r} has {busy} document(s) still ingesting; export it when they are ready")
        failed = documents.filter(status=DocumentStatus.FAILED).count()
        restricted = documents.filter(status=DocumentStatus.READY).exclude(department_id=corpus.department_id).count() \
            if corpus.department_id is None else 0
        header = {"kind": "header", "format": FORMAT, "version": VERSION, "exported_at": timezone.now().isoformat(),
                  "corpus": corpus_settings(corpus), "includes_bytes": include_bytes, "restricted_documents": restricted,
                  "embedding": {"model": corpus.embedding_model, "dim": corpus.embedding_dim, "key": corpus.model_key,
                                "dtype": VECTOR_DTYPE}}
        digest = hashlib.sha256()
        counts = {"document": 0, "chunk": 0, "sentence": 0}
        with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0) as stream:
            for item in itertools.chain([header], corpus_records(scope, corpus, vectors=True, content=include_bytes)):
                line = canonical_line(item)
                digest.update(line)
                stream.write(line)
                if item["kind"] in counts:
                    counts[item["kind"]] += 1
            manifest: dict = {"kind": "manifest", "format": FORMAT, "version": VERSION, "embedding_key": corpus.model_key,
                        "counts": {"documents": counts["document"], "chunks": counts["chunk"], "sentences": counts["sentence"]},
                        "sha256": digest.hexdigest()}
            stream.write(canonical_line(manifest))
    return ExportSummary(documents=counts["document"], chunks=counts["chunk"], sentences=counts["sentence"],
                         skipped_failed=failed, sha256=manifest["sha256"], model_key=corpus.model_key)


def corpus_records(scope: Scope, corpus: Corpus, *, vectors: bool, content: bool) -> Iterator[dict]:
    """The corpus's records in file order (documents by id, each with its chunks by ordinal, each chunk
    with its sentences by ordinal); refs numbered from 0 in that order. Without `vectors` the
    embedding fields are left out, without `content` the original bytes. Runs inside activate(scope)."""
    documents = (access.visible_documents(scope).filter(corpus_id=corpus.pk, status=DocumentStatus.READY)
                 .order_by("pk"))
    doc_ref = chunk_ref = 0
    last = 0
    while True:
        page = list(documents.filter(pk__gt=last).values(
            "pk", "title", "source_name", "mime_type", "sha256", "size_bytes", "metadata", "version", "chunk_count",
            "department__name")[:DOCUMENT_PAGE])
        if not page:
            return
        last = page[-1]["pk"]
        ids = [d["pk"] for d in page]
        chunks = _chunks(scope, ids, corpus.model_key, vectors)
        sentences = _sentences(scope, [c[0] for rows in chunks.values() for c in rows], corpus.model_key, vectors) \
            if corpus.sentence_vectors else {}
        blobs = dict(DocumentContent.objects.for_scope(scope).filter(document_id__in=ids).values_list("document_id", "data")) \
            if content else {}
        for d in page:
            rows = chunks.get(d["pk"], [])
            record = {"kind": "document", "ref": doc_ref, "title": d["title"], "source_name": d["source_name"],
                      "mime_type": d["mime_type"], "sha256": d["sha256"], "size_bytes": d["size_bytes"],
                      "metadata": d["metadata"] or {}, "version": d["version"], "chunk_count": len(rows),
                      "department": d["department__name"]}
            if content:
                blob = blobs.get(d["pk"])
                record["content"] = None if blob is None else _b64(bytes(blob))
            yield record
            for chunk_id, _doc, ordinal, text, locator, page_no, start, end, tokens, chash, flags, embedding in rows:
                chunk = {"kind": "chunk", "ref": chunk_ref, "document": doc_ref, "ordinal": ordinal, "text": text,
                         "locator": locator, "page": page_no, "char_start": start, "char_end": end, "token_count": tokens,
                         "content_hash": chash, "flags": flags if isinstance(flags, list) else json.loads(flags or "[]")}
                if vectors:
                    chunk["embedding"] = encode_vector(embedding.to_numpy())
                yield chunk
                for s_ordinal, s_start, s_end, s_embedding in sentences.get(chunk_id, []):
                    sentence = {"kind": "sentence", "chunk": chunk_ref, "ordinal": s_ordinal, "char_start": s_start,
                                "char_end": s_end}
                    if vectors:
                        sentence["embedding"] = encode_vector(s_embedding.to_numpy())
                    yield sentence
                chunk_ref += 1
            doc_ref += 1


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _chunks(scope: Scope, document_ids: list[int], model_key: str, vectors: bool) -> dict[int, list[tuple]]:
    """document id -> its chunk rows (id, document, ordinal, text, locator, page, start, end, tokens, hash,
    flags, vector or None), by ordinal; a chunk without a vector of the corpus's model is refused."""
    vector = "c.embedding::vector" if vectors else "NULL::vector"
    with vector_cursor() as cur:
        cur.execute(f"SELECT c.id, c.document_id, c.ordinal, c.text, c.locator, c.page, c.char_start, c.char_end, "  # noqa: S608  (a fixed column fragment)
                    f"c.token_count, c.content_hash, c.flags::text, {vector}, c.embedding_model = %s AND c.embedding IS NOT NULL "
                    "FROM kb_chunk c WHERE c.tenant_id = %s AND c.document_id = ANY(%s) ORDER BY c.document_id, c.ordinal",
                    [model_key, scope.tenant_id, document_ids], binary=True)
        out: dict[int, list[tuple]] = {}
        for row in cur.fetchall():
            if not row[-1]:
                raise ExportRefused(f"chunk {row[0]} has no vector of the corpus's model {model_key}")
            out.setdefault(row[1], []).append(tuple(row[:-1]))
    return out


def _sentences(scope: Scope, chunk_ids: list[int], model_key: str, vectors: bool) -> dict[int, list[tuple]]:
    """chunk id -> its sentence rows (ordinal, start, end, vector or None), by ordinal."""
    if not chunk_ids:
        return {}
    vector = "s.embedding::vector" if vectors else "NULL::vector"
    with vector_cursor() as cur:
        cur.execute(f"SELECT s.chunk_id, s.ordinal, s.char_start, s.char_end, {vector}, s.embedding_model = %s "  # noqa: S608  (a fixed column fragment)
                    "FROM kb_chunksentence s WHERE s.tenant_id = %s AND s.chunk_id = ANY(%s) ORDER BY s.chunk_id, s.ordinal",
                    [model_key, scope.tenant_id, chunk_ids], binary=True)
        out: dict[int, list[tuple]] = {}
        for row in cur.fetchall():
            if not row[-1]:
                raise ExportRefused(f"a sentence of chunk {row[0]} has no vector of the corpus's model {model_key}")
            out.setdefault(row[0], []).append(tuple(row[1:-1]))
    return out
