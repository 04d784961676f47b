"""`manage.py ingest_folder <folder> --tenant <slug> --corpus <name> [--department <name>] [--create]`.

Uploads every supported file under the folder (recursively, hidden files skipped) through the same
service as the API, with a progress bar. Without a broker each file is ingested right away
(eager mode); with one, the jobs are queued and --wait follows them to the end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from tqdm import tqdm

from kb.embedding import default_model_key, get_embedder
from kb.ingest import UploadRejected, group_max_jobs, source_name_for, upload_document
from kb.ingest.queue import run_jobs_here_without_a_worker
from kb.models import Corpus, Document, IngestJob, JobStatus
from kb.parsing import SUPPORTED_TYPES
from tenants.models import Department, Tenant
from tenants.scope import Scope, activate


class Command(BaseCommand):
    help = "Ingest all supported files (txt, md, html, pdf, docx) under a folder into a tenant's corpus."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder")
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--corpus", required=True, help="corpus name")
        parser.add_argument("--department", help="department name (for a corpus created with --create)")
        parser.add_argument("--create", action="store_true", help="create the corpus if it does not exist")
        parser.add_argument("--model", help="embedding model key for a created corpus (default: settings)")
        parser.add_argument("--wait", action="store_true", help="with a broker: wait until the queued jobs finish")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, folder: str, tenant: str, corpus: str, department: str | None, create: bool,
               model: str | None, wait: bool, no_progress: bool, **options: Any) -> None:
        run_jobs_here_without_a_worker()  # no scripts/run beside this command: its jobs run here
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            raise CommandError(f"{folder!r} is not a folder")
        found = Tenant.objects.filter(slug=tenant).first()
        if found is None:
            raise CommandError(f"no tenant with slug {tenant!r}")
        scope = Scope.system(found.id, principal="manage.py ingest_folder")
        target = self._corpus(scope, found, corpus, department, create, model)

        files = sorted(p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
        supported = [p for p in files if p.suffix.lower() in SUPPORTED_TYPES]
        skipped = [p for p in files if p.suffix.lower() not in SUPPORTED_TYPES]
        uploaded, unchanged, failed, jobs = 0, 0, [], []
        bar = tqdm(total=len(supported), unit="file", disable=no_progress, desc=f"ingest {target.name}")
        step = group_max_jobs()
        for first in range(0, len(supported), step):
            # One transaction per group of files: their jobs start together after the commit and are
            # embedded in shared full batches (in eager mode, right here).
            with transaction.atomic():
                for path in supported[first:first + step]:
                    name = source_name_for(path, root)
                    try:
                        doc, job = upload_document(scope=scope, corpus=target, filename=name, data=path.read_bytes())
                    except UploadRejected as exc:
                        failed.append((name, exc.message))
                        continue
                    if job is None:
                        unchanged += 1
                    else:
                        uploaded += 1
                        jobs.append(job.pk)
            bar.update(len(supported[first:first + step]))
        bar.close()
        if wait and jobs:
            self._wait(scope, jobs, no_progress)
        with activate(scope):
            failed_docs = Document.objects.for_scope(scope).filter(jobs__pk__in=jobs, status="failed").values_list("source_name", "error")
            failed.extend(failed_docs)
            pending = IngestJob.objects.for_scope(scope).filter(pk__in=jobs).exclude(status__in=[JobStatus.DONE, JobStatus.FAILED]).count()
            total = Corpus.objects.for_scope(scope).get(pk=target.pk).chunk_count
        self.stdout.write(f"uploaded {uploaded}, unchanged {unchanged}, skipped {len(skipped)} unsupported, "
                          f"failed {len(failed)}, still queued {pending}; corpus {target.name!r} has {total} chunks")
        for path in skipped:
            self.stdout.write(f"  skipped {source_name_for(path, root)} (unsupported type)")
        for name, reason in failed:
            self.stdout.write(f"  failed  {name}: {reason}")

    def _corpus(self, scope: Scope, tenant: Tenant, name: str, department: str | None, create: bool, model: str | None) -> Corpus:
        with activate(scope):
            corpus = Corpus.objects.for_scope(scope).filter(name=name).first()
            if corpus is not None:
                return corpus
            if not create:
                raise CommandError(f"tenant {tenant.slug!r} has no corpus {name!r} (use --create)")
            dept = None
            if department:
                dept = Department.objects.filter(tenant=tenant, name=department).first()
                if dept is None:
                    raise CommandError(f"tenant {tenant.slug!r} has no department {department!r}")
            embedder = get_embedder(model or default_model_key())
            embedding_model, _, _ = embedder.model_key.partition(":")
            return Corpus.objects.create(tenant=tenant, department=dept, name=name, embedding_model=embedding_model,
                                         embedding_dim=embedder.dim)

    def _wait(self, scope: Scope, jobs: list[int], no_progress: bool) -> None:
        bar = tqdm(total=len(jobs), unit="job", disable=no_progress, desc="waiting for jobs")
        finished = 0
        while finished < len(jobs):
            time.sleep(0.5)
            with activate(scope):
                now = IngestJob.objects.for_scope(scope).filter(pk__in=jobs, status__in=[JobStatus.DONE, JobStatus.FAILED]).count()
            bar.update(now - finished)
            finished = now
        bar.close()
