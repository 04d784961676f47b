"""`manage.py export_corpus --tenant <slug> --corpus <name> --out <file.jsonl.gz> [--without-bytes]`.

Writes the corpus to one portable, versioned file (kb.transfer; format in docs/export.md): its ready
documents with their metadata and original bytes, chunks, sentence vectors and embeddings, and a
manifest with counts and a sha256 digest. The file is written beside its final name and renamed
when complete, so a failed export never leaves a half file under that name.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.management.lookups import corpus_named, tenant_scope
from kb.transfer import ExportRefused, export_corpus
from tenants.scope import NotAllowed


class Command(BaseCommand):
    help = "Export a corpus (documents, chunks, sentence vectors, embeddings) to a .jsonl.gz corpus file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--corpus", required=True, help="corpus name")
        parser.add_argument("--out", required=True, type=Path, help="the file to write (.jsonl.gz)")
        parser.add_argument("--without-bytes", action="store_true",
                            help="leave the documents' original files out (smaller; the imported documents cannot be re-ingested)")

    def handle(self, *args: Any, tenant: str, corpus: str, out: Path, without_bytes: bool, **options: Any) -> None:
        scope = tenant_scope(tenant, "export_corpus")
        target = corpus_named(scope, tenant, corpus)
        partial = out.with_name(out.name + ".partial")
        started = time.perf_counter()
        try:
            with partial.open("wb") as stream:
                summary = export_corpus(scope=scope, corpus=target, out=stream, include_bytes=not without_bytes)
            os.replace(partial, out)
        except (ExportRefused, NotAllowed) as exc:
            partial.unlink(missing_ok=True)
            raise CommandError(str(exc)) from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        skipped = f"; {summary.skipped_failed} failed document(s) left out" if summary.skipped_failed else ""
        self.stdout.write(f"exported {corpus!r} to {out} ({out.stat().st_size} bytes, {time.perf_counter() - started:.2f} s): "
                          f"{summary.documents} documents, {summary.chunks} chunks, {summary.sentences} sentence vectors, "
                          f"model {summary.model_key}, sha256 {summary.sha256}{skipped}")
