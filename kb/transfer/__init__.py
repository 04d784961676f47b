"""Corpora saved to one portable, versioned file and loaded back (issue 51; docs/export.md).

- `fileformat`: the file (gzip'd JSON lines: header, records, manifest with counts and sha256),
  read with every line size-capped;
- `export`: `export_corpus(scope=, corpus=, out=)` writes a corpus's documents, chunks, sentence
  vectors and embeddings (the stored halfvec values, so nothing is re-embedded on import);
- `validate`: every check of a file, run in full before anything is written;
- `importer`: `import_corpus(scope=, stream=)` into the caller's tenant only, in one transaction,
  idempotent (the same content imported twice is recognised, nothing written).

The management commands (`export_corpus`, `import_corpus`), the admin's actions and the API's
endpoints all call these two functions; the access rules are kb.access's.
"""

from kb.transfer.export import ExportRefused, ExportSummary, export_corpus
from kb.transfer.fileformat import FORMAT, VERSION, FileRejected
from kb.transfer.importer import ImportResult, import_corpus

__all__ = ["FORMAT", "VERSION", "ExportRefused", "ExportSummary", "FileRejected", "ImportResult", "export_corpus",
           "import_corpus"]
