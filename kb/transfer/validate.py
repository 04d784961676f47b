"""Checking a whole corpus file before anything is written (kb.transfer.importer's first pass).

`check_file` reads the file once (kb.transfer.fileformat.LineReader: bounded lines) and checks every
line against the format: the header (format, version, corpus settings, model key and dimension),
every record (fields and types, refs in sequence, chunks right after their document and counted by
it, non-empty texts whose content_hash is their sha256, sentence spans inside their chunk, original
bytes matching their sha256, vectors of the declared dimension and finite) and the manifest (counts,
and the sha256 of every byte before it). Any failure raises FileRejected naming the line.

It also computes the file's content digest (`content_digest`): the records without their vectors,
original bytes and department, which an existing corpus reproduces from the database when it holds
the same documents and chunks; importing the same file twice is recognised by it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

from kb.ingest.corpora import DeclarationRejected, check_declarations
from kb.metadata import metadata_problem, text_problem
from kb.transfer.fileformat import (
    FORMAT,
    VECTOR_DTYPE,
    VERSION,
    FileRejected,
    LineReader,
    canonical_line,
    decode_vector,
    exact_keys,
    int_field,
    text_field,
)
from kb.vector_index import HALFVEC_MAX_DIM

SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_TEXT_CHARS = 10_000_000
MAX_DESCRIPTION_CHARS = 100_000
# What the content digest leaves out: what differs between a file and the corpus imported from it.
NOT_CONTENT = ("embedding", "content", "department")


def content_line(record: dict) -> bytes:
    """A record's contribution to the content digest."""
    return canonical_line({k: v for k, v in record.items() if k not in NOT_CONTENT})


def content_digest(records: Iterable[dict]) -> str:
    digest = hashlib.sha256()
    for record in records:
        digest.update(content_line(record))
    return digest.hexdigest()


@dataclass
class CheckedFile:
    """What the first pass learned: the header's parts, the counts, the digests; with `keep_texts`,
    sha256 -> text of every chunk and sentence (for re-embedding)."""

    corpus: dict
    model: str
    dim: int
    includes_bytes: bool
    restricted_documents: int
    sha256: str = ""
    content_sha256: str = ""
    counts: dict[str, int] = field(default_factory=lambda: {"documents": 0, "chunks": 0, "sentences": 0})
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def model_key(self) -> str:
        return f"{self.model}:{self.dim}"


def check_file(stream: IO[bytes], *, max_line: int, keep_texts: bool = False) -> CheckedFile:
    """Check the whole file (see the module docstring); FileRejected at the first problem."""
    reader = LineReader(stream, max_line=max_line)
    lines = iter(reader)
    first = next(lines, None)
    if first is None:
        raise FileRejected("the file is empty: no header, no manifest")
    checked = check_header(first)
    walk = _Walk(checked, keep_texts)
    for record in lines:
        if record["kind"] == "manifest":
            walk.finish_document()
            check_manifest(record, checked, reader.digest_before_last(), reader.lineno)
            if next(lines, None) is not None:
                raise FileRejected(f"line {reader.lineno}: data after the manifest")
            checked.content_sha256 = walk.digest.hexdigest()
            return checked
        walk.record(record, reader.lineno)
    raise FileRejected("the manifest is missing: the file is truncated or not a complete export")


def check_header(header: dict) -> CheckedFile:
    where = "line 1 (header)"
    if header.get("kind") != "header" or header.get("format") != FORMAT:
        raise FileRejected(f"{where}: not a corpus file header (expected format {FORMAT!r} first)")
    if header.get("version") != VERSION:
        raise FileRejected(f"{where}: format version {header.get('version')!r} is not supported (this installation "
                           f"reads version {VERSION})")
    exact_keys(header, {"kind", "format", "version", "exported_at", "corpus", "embedding", "includes_bytes",
                        "restricted_documents"}, set(), where)
    corpus = header["corpus"]
    if not isinstance(corpus, dict):
        raise FileRejected(f"{where}: corpus must be an object")
    exact_keys(corpus, {"name", "description", "language", "chunk_target_tokens", "chunk_overlap_tokens", "sentence_vectors",
                        "date_key", "facet_keys"}, set(), f"{where} corpus")
    text_field(corpus, "name", f"{where} corpus", max_chars=200, empty=False)
    text_field(corpus, "description", f"{where} corpus", max_chars=MAX_DESCRIPTION_CHARS)
    int_field(corpus, "chunk_target_tokens", f"{where} corpus", minimum=1, maximum=100_000)
    int_field(corpus, "chunk_overlap_tokens", f"{where} corpus", maximum=100_000)
    if not isinstance(corpus["sentence_vectors"], bool):
        raise FileRejected(f"{where}: corpus sentence_vectors must be true or false")
    try:
        corpus.update(check_declarations(date_key=corpus["date_key"], facet_keys=corpus["facet_keys"],
                                         language=corpus["language"]))
    except DeclarationRejected as exc:
        raise FileRejected(f"{where}: corpus {exc.field}: {exc.message}") from None
    embedding = header["embedding"]
    if not isinstance(embedding, dict):
        raise FileRejected(f"{where}: embedding must be an object")
    exact_keys(embedding, {"model", "dim", "key", "dtype"}, set(), f"{where} embedding")
    model = text_field(embedding, "model", f"{where} embedding", max_chars=100, empty=False)
    dim = int_field(embedding, "dim", f"{where} embedding", minimum=1, maximum=HALFVEC_MAX_DIM)
    if ":" in model or embedding["key"] != f"{model}:{dim}":
        raise FileRejected(f"{where}: embedding key {embedding['key']!r} is not '<model>:<dim>' of its model and dim")
    if embedding["dtype"] != VECTOR_DTYPE:
        raise FileRejected(f"{where}: embedding dtype {embedding['dtype']!r} is not supported (expected {VECTOR_DTYPE})")
    if not isinstance(header["includes_bytes"], bool):
        raise FileRejected(f"{where}: includes_bytes must be true or false")
    restricted = int_field(header, "restricted_documents", where)
    return CheckedFile(corpus=corpus, model=model, dim=int(dim or 0), includes_bytes=header["includes_bytes"],
                       restricted_documents=int(restricted or 0))


def check_manifest(manifest: dict, checked: CheckedFile, digest: str, lineno: int) -> None:
    where = f"line {lineno} (manifest)"
    exact_keys(manifest, {"kind", "format", "version", "embedding_key", "counts", "sha256"}, set(), where)
    if manifest["format"] != FORMAT or manifest["version"] != VERSION:
        raise FileRejected(f"{where}: format or version differs from the header's")
    if manifest["embedding_key"] != checked.model_key:
        raise FileRejected(f"{where}: embedding key {manifest['embedding_key']!r} differs from the header's "
                           f"{checked.model_key!r}")
    if manifest["sha256"] != digest:
        raise FileRejected(f"{where}: the sha256 digest does not match the file's content: the file was altered or damaged")
    counts = manifest["counts"]
    if counts != checked.counts:
        raise FileRejected(f"{where}: counts {counts} differ from the records in the file {checked.counts}")
    checked.sha256 = digest


class _Walk:
    """The record-by-record checks of one file, in order."""

    def __init__(self, checked: CheckedFile, keep_texts: bool) -> None:
        self.checked = checked
        self.keep_texts = keep_texts
        self.digest = hashlib.sha256()
        self.document_chunks = -1  # chunks the current document declares; -1: no document yet
        self.chunks_seen = 0
        self.chunk_text = ""
        self.sentences_seen = 0
        self.source_names: set[str] = set()

    def record(self, record: dict, lineno: int) -> None:
        kind = record["kind"]
        where = f"line {lineno} ({kind})"
        if kind == "document":
            self.finish_document()
            self._document(record, where)
        elif kind == "chunk":
            self._chunk(record, where)
        elif kind == "sentence":
            self._sentence(record, where)
        else:
            raise FileRejected(f"line {lineno}: unknown record kind {kind!r}")
        self.digest.update(content_line(record))

    def finish_document(self) -> None:
        if self.document_chunks >= 0 and self.chunks_seen != self.document_chunks:
            raise FileRejected(f"document {self.checked.counts['documents'] - 1} declares {self.document_chunks} chunks, "
                               f"the file holds {self.chunks_seen}")

    def _document(self, record: dict, where: str) -> None:
        counts = self.checked.counts
        exact_keys(record, {"kind", "ref", "title", "source_name", "mime_type", "sha256", "size_bytes", "metadata", "version",
                            "chunk_count", "department"}, {"content"}, where)
        if record["ref"] != counts["documents"]:
            raise FileRejected(f"{where}: ref {record['ref']!r} out of sequence (expected {counts['documents']})")
        text_field(record, "title", where, max_chars=500)
        source = text_field(record, "source_name", where, max_chars=500, empty=False)
        if source in self.source_names:
            raise FileRejected(f"{where}: source_name {source!r} appears twice")
        self.source_names.add(source)
        text_field(record, "mime_type", where, max_chars=100)
        if not isinstance(record["sha256"], str) or not SHA256.fullmatch(record["sha256"]):
            raise FileRejected(f"{where}: sha256 must be 64 lowercase hex digits")
        size = int_field(record, "size_bytes", where, maximum=2**62)
        if problem := metadata_problem(record["metadata"]):
            raise FileRejected(f"{where}: metadata {problem}")
        int_field(record, "version", where, minimum=1)
        self.document_chunks = int_field(record, "chunk_count", where, minimum=1) or 0
        if record["department"] is not None:
            text_field(record, "department", where, max_chars=200)
        if ("content" in record) != self.checked.includes_bytes:
            raise FileRejected(f"{where}: content is {'missing' if self.checked.includes_bytes else 'present'} but the "
                               f"header says includes_bytes={str(self.checked.includes_bytes).lower()}")
        if record.get("content") is not None:
            try:
                data = base64.b64decode(record["content"], validate=True)
            except (ValueError, TypeError):
                raise FileRejected(f"{where}: content is not valid base64") from None
            if len(data) != size or hashlib.sha256(data).hexdigest() != record["sha256"]:
                raise FileRejected(f"{where}: content does not match its sha256 and size_bytes")
        counts["documents"] += 1
        self.chunks_seen = 0

    def _chunk(self, record: dict, where: str) -> None:
        counts = self.checked.counts
        exact_keys(record, {"kind", "ref", "document", "ordinal", "text", "locator", "page", "char_start", "char_end",
                            "token_count", "content_hash", "flags", "embedding"}, set(), where)
        if self.document_chunks < 0 or record["document"] != counts["documents"] - 1:
            raise FileRejected(f"{where}: a chunk must follow its document (document {record['document']!r})")
        if record["ref"] != counts["chunks"]:
            raise FileRejected(f"{where}: ref {record['ref']!r} out of sequence (expected {counts['chunks']})")
        if record["ordinal"] != self.chunks_seen:
            raise FileRejected(f"{where}: ordinal {record['ordinal']!r} out of sequence (expected {self.chunks_seen})")
        text = text_field(record, "text", where, max_chars=MAX_TEXT_CHARS, empty=False)
        text_field(record, "locator", where, max_chars=1000)
        int_field(record, "page", where, nullable=True)
        start = int_field(record, "char_start", where)
        end = int_field(record, "char_end", where)
        if start is None or end is None or start > end:
            raise FileRejected(f"{where}: char_start is after char_end")
        int_field(record, "token_count", where)
        chash = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if record["content_hash"] != chash:
            raise FileRejected(f"{where}: content_hash is not the sha256 of the chunk's text")
        flags = record["flags"]
        if not isinstance(flags, list) or not all(isinstance(f, str) and len(f) <= 100 and not text_problem(f) for f in flags):
            raise FileRejected(f"{where}: flags must be a list of short strings")
        decode_vector(record["embedding"], self.checked.dim, where)
        if self.keep_texts:
            self.checked.texts[chash] = text
        counts["chunks"] += 1
        self.chunks_seen += 1
        self.chunk_text = text
        self.sentences_seen = 0

    def _sentence(self, record: dict, where: str) -> None:
        counts = self.checked.counts
        exact_keys(record, {"kind", "chunk", "ordinal", "char_start", "char_end", "embedding"}, set(), where)
        if not self.checked.corpus["sentence_vectors"]:
            raise FileRejected(f"{where}: sentence vectors in a file whose corpus keeps none")
        if self.chunks_seen == 0 or record["chunk"] != counts["chunks"] - 1:
            raise FileRejected(f"{where}: a sentence must follow its chunk (chunk {record['chunk']!r})")
        if record["ordinal"] != self.sentences_seen:
            raise FileRejected(f"{where}: ordinal {record['ordinal']!r} out of sequence (expected {self.sentences_seen})")
        start = int_field(record, "char_start", where)
        end = int_field(record, "char_end", where)
        if start is None or end is None or not 0 <= start < end <= len(self.chunk_text):
            raise FileRejected(f"{where}: the sentence span is not inside its chunk's text")
        decode_vector(record["embedding"], self.checked.dim, where)
        if self.keep_texts:
            piece = self.chunk_text[start:end]
            self.checked.texts[hashlib.sha256(piece.encode("utf-8")).hexdigest()] = piece
        counts["sentences"] += 1
        self.sentences_seen += 1
