"""The corpus file: one gzip'd stream of JSON lines, versioned, read with every size bounded.

Layout (format "grounded-corpus", version 1; docs/export.md):

1. a header line: `{"kind": "header", "format", "version", "corpus": {settings}, "embedding": {"model",
   "dim", "key", "dtype": "float16"}, "includes_bytes", "restricted_documents", "exported_at"}`;
2. records, each document followed by its chunks, each chunk by its sentences (when the corpus keeps
   sentence vectors): `{"kind": "document", "ref", ...}`, `{"kind": "chunk", "ref", "document", ...}`,
   `{"kind": "sentence", "chunk", ...}`; refs are the file's own sequence numbers (0, 1, 2, ...),
   never database ids;
3. a manifest line last: `{"kind": "manifest", "format", "version", "embedding_key", "counts":
   {"documents", "chunks", "sentences"}, "sha256"}`, the sha256 of every byte before it (header and
   records, as stored, newlines included).

Vectors are the stored halfvec values, base64 of little-endian float16 (exactly what the database
holds: an imported corpus searches identically without re-embedding).

Reading never holds more than one line: a line longer than the cap is refused after reading
cap + 1 bytes of it; a file that is not gzip (a zip archive, plain text), a gzip holding a zip,
a truncated stream, a line that is not UTF-8 or not a JSON object, and a file without its manifest
are each refused by `FileRejected` naming the problem and the line.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from kb.metadata import text_problem

FORMAT = "grounded-corpus"
VERSION = 1
VECTOR_DTYPE = "float16"
GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
# A line holds at most one document's original bytes (base64: 4/3 of them) or one chunk: the cap
# leaves room for the largest upload the product accepts (MAX_UPLOAD_BYTES) and its metadata.
LINE_SLACK_BYTES = 1024 * 1024


def max_line_bytes(max_upload_bytes: int) -> int:
    """The longest line a corpus file may hold, for an installation accepting uploads of `max_upload_bytes`."""
    return max_upload_bytes * 4 // 3 + LINE_SLACK_BYTES


class FileRejected(ValueError):
    """The file cannot be imported; `message` says why (and where), `field` names the input at fault."""

    def __init__(self, message: str, field: str = "file") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def canonical_line(record: dict) -> bytes:
    """A record as its one line: compact JSON, keys sorted, UTF-8, newline-terminated (deterministic)."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def encode_vector(values: np.ndarray) -> str:
    """A stored vector (float32 holding halfvec values) as base64 of little-endian float16."""
    return base64.b64encode(np.asarray(values, dtype="<f2").tobytes()).decode("ascii")


def decode_vector(text: object, dim: int, where: str) -> np.ndarray:
    """The float32 vector of a base64 float16 field; FileRejected unless it is `dim` finite values."""
    if not isinstance(text, str):
        raise FileRejected(f"{where}: embedding must be a base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise FileRejected(f"{where}: embedding is not valid base64") from None
    if len(raw) != dim * 2:
        raise FileRejected(f"{where}: embedding has {len(raw) // 2} dimensions, the file declares {dim}")
    vector = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    if not np.isfinite(vector).all():
        raise FileRejected(f"{where}: embedding holds a value that is not finite")
    return vector


class LineReader:
    """The lines of a corpus file, each parsed as a JSON object, with the running sha256 of the bytes
    read so far (`digest_before_last`: of every line before the one just returned)."""

    def __init__(self, stream: IO[bytes], *, max_line: int) -> None:
        self.max_line = max_line
        self.lineno = 0
        self._digest = hashlib.sha256()
        self._previous = hashlib.sha256()
        head = stream.read(4)
        if head[:4] in ZIP_MAGICS:
            raise FileRejected("the file is a zip archive, not a corpus file (a gzip'd JSON-lines stream, .jsonl.gz)")
        if head[:2] != GZIP_MAGIC:
            raise FileRejected("the file is not gzip-compressed: a corpus file is a gzip'd JSON-lines stream (.jsonl.gz)")
        stream.seek(0)
        self._gzip = gzip.GzipFile(fileobj=stream, mode="rb")

    def __iter__(self) -> Iterator[dict]:
        while True:
            line = self._read_line()
            if line is None:
                return
            yield line

    def digest_before_last(self) -> str:
        return self._previous.hexdigest()

    def _read_line(self) -> dict | None:
        try:
            raw = self._gzip.readline(self.max_line + 1)
        except EOFError:
            raise FileRejected(f"the file is truncated (the compressed stream ends inside line {self.lineno + 1})") from None
        except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise FileRejected(f"the file is not a valid gzip stream near line {self.lineno + 1}: {exc}") from None
        if not raw:
            return None
        self.lineno += 1
        if len(raw) > self.max_line:
            raise FileRejected(f"line {self.lineno} is longer than {self.max_line} bytes: refused unread")
        if self.lineno == 1 and raw[:4] in ZIP_MAGICS:
            raise FileRejected("the gzip stream holds a zip archive, not JSON lines")
        if not raw.endswith(b"\n"):
            raise FileRejected(f"the file is truncated: line {self.lineno} has no end")
        self._previous = self._digest.copy()
        self._digest.update(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FileRejected(f"line {self.lineno} is not UTF-8 (byte {exc.start})") from None
        try:
            value = json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise FileRejected(f"line {self.lineno} is not JSON: {exc}") from None
        if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
            raise FileRejected(f"line {self.lineno} is not a record: expected a JSON object with a \"kind\"")
        return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


# --- Field checks ---------------------------------------------------------------------------------

def exact_keys(record: dict, required: set[str], optional: set[str], where: str) -> None:
    missing = required - record.keys()
    if missing:
        raise FileRejected(f"{where}: missing {', '.join(sorted(missing))}")
    unknown = record.keys() - required - optional
    if unknown:
        raise FileRejected(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")


def text_field(record: dict, key: str, where: str, *, max_chars: int, empty: bool = True) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise FileRejected(f"{where}: {key} must be a string")
    if not empty and not value.strip():
        raise FileRejected(f"{where}: {key} is empty")
    if len(value) > max_chars:
        raise FileRejected(f"{where}: {key} is longer than {max_chars} characters")
    if problem := text_problem(value):
        raise FileRejected(f"{where}: {key} {problem}")
    return value


def int_field(record: dict, key: str, where: str, *, minimum: int = 0, maximum: int = 2**31 - 1,
              nullable: bool = False) -> int | None:
    value = record.get(key)
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise FileRejected(f"{where}: {key} must be an integer from {minimum} to {maximum}")
    return value
