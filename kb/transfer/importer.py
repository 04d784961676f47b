"""Loading a corpus file into the caller's tenant as a new corpus, without re-embedding.

`import_corpus(scope=, stream=, ...)`:

1. checks the caller may create a corpus in the target department (kb.access; the tenant is the
   scope's, never anything in the file);
2. reads the whole file once and checks everything (kb.transfer.validate.check_file) before anything
   is written: a bad file raises FileRejected, and nothing is stored;
3. checks the file's embedding model against this installation: its vectors are used as they are
   only when the model is this installation's default, the packaged local model, or one a corpus of
   this tenant already uses, and resolves here with the file's dimension; otherwise refused, unless `reembed` names a model
   to embed the texts with instead (staged in the embedding cache before the write);
4. is idempotent: when a corpus of that name exists and holds the same content (the content digest
   of its records equals the file's), nothing is written and the result says "already imported";
   a corpus of that name with other content is refused;
5. writes the corpus, its documents (ready, with their original bytes when the file has them), chunks
   (keyword index computed by PostgreSQL as ingestion computes it) and sentence vectors in ONE
   transaction, reading the file a second time; new database ids throughout (the file's refs are
   only its own). The second read is checked against the first (digest, counts): a file changed in
   between rolls the transaction back.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import IO

import numpy as np
from django.db import IntegrityError, transaction

from kb import access
from kb.embedding import LOCAL_MODEL_KEY, MULTILINGUAL_MODEL_KEY, ModelChoiceError, checked_model_key, default_model_key, get_embedder
from kb.ingest.dates import document_date
from kb.ingest.documents import content_hash
from kb.ingest.pipeline import insert_sentences
from kb.ingest.vectors import ensure_index_outside_transactions, vector_cursor, vectors_for
from kb.metadata import text_problem
from kb.models import Corpus, Document, DocumentContent, DocumentStatus
from kb.transfer.export import corpus_records
from kb.transfer.fileformat import FileRejected, LineReader, decode_vector, max_line_bytes
from kb.transfer.validate import CheckedFile, check_file, content_digest
from tenants.conf import product_settings
from tenants.models import Department
from tenants.scope import NotAllowed, Scope, activate

WRITE_BATCH_DOCUMENTS = 500


@dataclass(frozen=True)
class ImportResult:
    corpus_id: int
    corpus_name: str
    created: bool  # False: the same content was imported before (nothing written)
    documents: int
    chunks: int
    sentences: int
    model_key: str
    reembedded: bool

    def describe(self) -> str:
        if not self.created:
            return f"already imported: corpus {self.corpus_name!r} (id {self.corpus_id}) holds this file's content; nothing written"
        how = f"re-embedded into {self.model_key}" if self.reembedded else f"vectors of {self.model_key} kept, nothing embedded"
        return (f"imported corpus {self.corpus_name!r} (id {self.corpus_id}): {self.documents} documents, {self.chunks} chunks, "
                f"{self.sentences} sentence vectors; {how}")


def import_corpus(*, scope: Scope, stream: IO[bytes], name: str | None = None, department_id: int | None = None,
                  reembed: str | None = None, max_line: int | None = None) -> ImportResult:
    """Import the corpus file `stream` (binary, seekable) into `scope`'s tenant; see the module docstring.
    `name` overrides the file's corpus name; `reembed` ("<model>:<dim>") embeds the texts with that model
    instead of keeping the file's vectors. Raises FileRejected (the file or an argument: `field`),
    NotAllowed (the caller's role or department)."""
    access.check_may_import_corpus(scope, department_id)
    if department_id is not None:
        with activate(scope):
            if not Department.objects.filter(tenant_id=scope.tenant_id, pk=department_id).exists():
                raise NotAllowed("no such department in this tenant", field="department")
    cap = max_line if max_line is not None else max_line_bytes(product_settings.MAX_UPLOAD_BYTES)
    checked = check_file(stream, max_line=cap, keep_texts=reembed is not None)
    target_name = (name if name is not None else checked.corpus["name"]).strip()
    if not target_name or len(target_name) > 200 or text_problem(target_name):
        raise FileRejected("a corpus name of 1 to 200 characters, without NUL", field="name")
    if checked.restricted_documents and department_id is None:
        raise FileRejected(f"{checked.restricted_documents} document(s) of this corpus were limited to a department where "
                           "it was exported; import it into a department so they are not opened to the whole tenant",
                           field="department")
    model_key = _target_model(scope, checked, reembed)
    existing = _existing(scope, target_name, checked)
    if existing is not None:
        return existing
    vectors = None
    if model_key != checked.model_key:
        vectors = vectors_for(scope, get_embedder(model_key), checked.texts)
    model, _, dim = model_key.partition(":")
    ensure_index_outside_transactions(model_key, int(dim))
    try:
        with activate(scope), transaction.atomic():
            corpus = Corpus.objects.create(tenant_id=scope.tenant_id, department_id=department_id, name=target_name,
                                           embedding_model=model, embedding_dim=int(dim),
                                           **{k: v for k, v in checked.corpus.items() if k != "name"})
            written = _write(scope, corpus, stream, checked, cap, vectors)
    except IntegrityError:
        raise FileRejected(f"a corpus named {target_name!r} was created meanwhile; import under another name",
                           field="name") from None
    return ImportResult(corpus_id=corpus.pk, corpus_name=corpus.name, created=True, documents=written["documents"],
                        chunks=written["chunks"], sentences=written["sentences"], model_key=model_key,
                        reembedded=vectors is not None)


def _target_model(scope: Scope, checked: CheckedFile, reembed: str | None) -> str:
    """The model the imported chunks will carry: the file's (checked usable here) or `reembed`'s."""
    if reembed is not None:
        model, _, dim = reembed.partition(":")
        try:
            return checked_model_key(model, int(dim) if dim.isdigit() else 0)
        except ModelChoiceError as exc:
            raise FileRejected(f"re-embed model {reembed!r}: {exc}", field="reembed") from None
    key = checked.model_key
    with activate(scope):
        in_use = Corpus.objects.for_scope(Scope.system(scope.tenant_id)).filter(
            embedding_model=checked.model, embedding_dim=checked.dim).exists()
    if key not in (default_model_key(), LOCAL_MODEL_KEY, MULTILINGUAL_MODEL_KEY) and not in_use:  # the packaged models
        raise FileRejected(f"the file's vectors are of model {key}, which this installation does not use (its model is "
                           f"{default_model_key()}); import with re-embedding into a model of this installation",
                           field="embedding")
    try:
        embedder = get_embedder(key)
    except ValueError as exc:
        raise FileRejected(f"the file's model {key} is not available here: {exc}", field="embedding") from None
    if embedder.dim != checked.dim:
        raise FileRejected(f"the file declares {checked.dim}-dimensional vectors of {checked.model}; this installation's "
                           f"{checked.model} makes {embedder.dim}", field="embedding")
    return key


def _existing(scope: Scope, name: str, checked: CheckedFile) -> ImportResult | None:
    """The result for a corpus of that name that already holds the file's content; None when there is
    no such corpus; FileRejected when the name is taken by other content (or by a corpus the caller
    cannot see)."""
    with activate(scope):
        taken = Corpus.objects.for_scope(Scope.system(scope.tenant_id)).filter(name=name).exists()
        if not taken:
            return None
        corpus = access.visible_corpora(scope).filter(name=name).first()
        if corpus is None or content_digest(corpus_records(scope, corpus, vectors=False, content=False)) != checked.content_sha256:
            raise FileRejected(f"a corpus named {name!r} already exists in this tenant with other content; "
                               "import under another name", field="name")
        counts = checked.counts
        return ImportResult(corpus_id=corpus.pk, corpus_name=corpus.name, created=False, documents=counts["documents"],
                            chunks=counts["chunks"], sentences=counts["sentences"], model_key=corpus.model_key,
                            reembedded=False)


class _Batch:
    """Documents read in the second pass, with their chunks and sentences, waiting to be written."""

    def __init__(self) -> None:
        self.documents: list[dict] = []
        self.chunks: list[dict] = []  # each with "_doc": index in documents
        self.sentences: list[dict] = []  # each with "_chunk": index in chunks


def _write(scope: Scope, corpus: Corpus, stream: IO[bytes], checked: CheckedFile, cap: int,
           vectors: dict[str, np.ndarray] | None) -> dict[str, int]:
    """The second pass: every record written, a batch of documents at a time; inside the transaction."""
    stream.seek(0)
    reader = LineReader(stream, max_line=cap)
    written = {"documents": 0, "chunks": 0, "sentences": 0}
    batch = _Batch()
    manifest = None
    for record in reader:
        kind = record["kind"]
        if kind == "document":
            if len(batch.documents) >= WRITE_BATCH_DOCUMENTS:
                _flush(scope, corpus, batch, checked, vectors, written)
                batch = _Batch()
            batch.documents.append(record)
        elif kind == "chunk":
            batch.chunks.append({**record, "_doc": len(batch.documents) - 1})
        elif kind == "sentence":
            batch.sentences.append({**record, "_chunk": len(batch.chunks) - 1})
        elif kind == "manifest":
            manifest = record
            if reader.digest_before_last() != checked.sha256:
                raise FileRejected("the file changed while it was imported; nothing was written")
    _flush(scope, corpus, batch, checked, vectors, written)
    if manifest is None or written != checked.counts:
        raise FileRejected("the file changed while it was imported; nothing was written")
    corpus.chunk_count = written["chunks"]
    corpus.save(update_fields=["chunk_count"])
    return written


def _flush(scope: Scope, corpus: Corpus, batch: _Batch, checked: CheckedFile, vectors: dict[str, np.ndarray] | None,
           written: dict[str, int]) -> None:
    if not batch.documents:
        return
    documents = Document.objects.bulk_create([
        Document(tenant_id=scope.tenant_id, department_id=corpus.department_id, corpus=corpus, title=d["title"],
                 source_name=d["source_name"], mime_type=d["mime_type"], sha256=d["sha256"], size_bytes=d["size_bytes"],
                 status=DocumentStatus.READY, metadata=d["metadata"], dated_at=document_date(d["metadata"], corpus.date_key),
                 version=d["version"], chunk_count=d["chunk_count"])
        for d in batch.documents])
    contents = [DocumentContent(document=doc, tenant_id=scope.tenant_id, data=_b64decode(d["content"]))
                for doc, d in zip(documents, batch.documents, strict=True) if d.get("content") is not None]
    if contents:
        DocumentContent.objects.bulk_create(contents)
    chunk_ids = _insert_chunks(scope, corpus, documents, batch, checked, vectors)
    _insert_sentences(scope, corpus, chunk_ids, batch, checked, vectors)
    written["documents"] += len(documents)
    written["chunks"] += len(batch.chunks)
    written["sentences"] += len(batch.sentences)


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _vector(record: dict, checked: CheckedFile, vectors: dict[str, np.ndarray] | None, text_hash: str) -> np.ndarray:
    if vectors is not None:
        return vectors[text_hash]
    return decode_vector(record["embedding"], checked.dim, "record")


def _insert_chunks(scope: Scope, corpus: Corpus, documents: list[Document], batch: _Batch, checked: CheckedFile,
                   vectors: dict[str, np.ndarray] | None) -> list[int]:
    """The batch's chunks, keyword index computed as ingestion computes it; their new ids in batch order."""
    chunks = batch.chunks
    if not chunks:
        return []
    with vector_cursor() as cur:
        cur.execute(
            """
            INSERT INTO kb_chunk (tenant_id, department_id, corpus_id, document_id, ordinal, text, locator, page,
                                  char_start, char_end, token_count, content_hash, embedding, embedding_model,
                                  search_vector, flags, created_at)
            SELECT %(tenant)s, %(department)s, %(corpus)s, u.document_id, u.ordinal, u.text, u.locator, u.page,
                   u.char_start, u.char_end, u.token_count, u.content_hash, u.embedding, %(model)s,
                   to_tsvector(%(language)s::regconfig, u.title || ' ' || u.locator || ' ' || u.text), u.flags::jsonb, now()
            FROM unnest(%(document)s::bigint[], %(title)s::text[], %(ordinal)s::int[], %(text)s::text[], %(locator)s::text[],
                        %(page)s::int[], %(char_start)s::int[], %(char_end)s::int[], %(token_count)s::int[],
                        %(hash)s::text[], %(embedding)b::vector[], %(flags)s::text[], %(position)s::int[])
                 AS u(document_id, title, ordinal, text, locator, page, char_start, char_end, token_count, content_hash,
                      embedding, flags, position)
            ORDER BY u.position
            RETURNING id, document_id, ordinal
            """,
            {
                "tenant": scope.tenant_id, "department": corpus.department_id, "corpus": corpus.pk,
                "model": corpus.model_key, "language": corpus.language,
                "document": [documents[c["_doc"]].pk for c in chunks], "title": [documents[c["_doc"]].title for c in chunks],
                "ordinal": [c["ordinal"] for c in chunks], "text": [c["text"] for c in chunks],
                "locator": [c["locator"] for c in chunks], "page": [c["page"] for c in chunks],
                "char_start": [c["char_start"] for c in chunks], "char_end": [c["char_end"] for c in chunks],
                "token_count": [c["token_count"] for c in chunks], "hash": [c["content_hash"] for c in chunks],
                "embedding": [_vector(c, checked, vectors, c["content_hash"]) for c in chunks],
                "flags": [json.dumps(c["flags"]) for c in chunks], "position": list(range(len(chunks))),
            },
        )
        ids = {(document_id, ordinal): pk for pk, document_id, ordinal in cur.fetchall()}
    if len(ids) != len(chunks):
        raise FileRejected("the chunks could not all be written")
    return [ids[(documents[c["_doc"]].pk, c["ordinal"])] for c in chunks]


def _insert_sentences(scope: Scope, corpus: Corpus, chunk_ids: list[int], batch: _Batch, checked: CheckedFile,
                      vectors: dict[str, np.ndarray] | None) -> None:
    """The batch's sentence vectors, their lexemes computed as ingestion computes them."""
    sentences = batch.sentences
    if not sentences:
        return

    def text_hash(s: dict) -> str:
        text = batch.chunks[s["_chunk"]]["text"][s["char_start"]:s["char_end"]]
        return content_hash(text)

    with vector_cursor() as cur:
        insert_sentences(cur, scope, corpus.model_key, corpus.language,
                         [(chunk_ids[s["_chunk"]], s["ordinal"], s["char_start"], s["char_end"], _vector(s, checked, vectors, text_hash(s)))
                          for s in sentences])
