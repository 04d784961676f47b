"""`manage.py reembed_corpus --tenant <slug> --corpus <name> --model <key> [--wait]`.

Re-embeds a corpus into another model in the background; searches use the old vectors until the
job switches every chunk and the corpus in one transaction.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kb.ingest import start_reembed
from kb.ingest.queue import run_jobs_here_without_a_worker
from kb.management.lookups import corpus_named, tenant_scope
from kb.models import IngestJob, JobStatus
from tenants.scope import activate


class Command(BaseCommand):
    help = "Re-embed every chunk of a corpus with another embedding model (e.g. gemini-embedding-001:768)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--corpus", required=True, help="corpus name")
        parser.add_argument("--model", required=True, help="target model key '<model>:<dim>'")
        parser.add_argument("--wait", action="store_true", help="wait for the job to finish")

    def handle(self, *args: Any, tenant: str, corpus: str, model: str, wait: bool, **options: Any) -> None:
        run_jobs_here_without_a_worker()  # no scripts/run beside this command: its jobs run here
        scope = tenant_scope(tenant, "reembed_corpus")
        target = corpus_named(scope, tenant, corpus)
        try:
            job = start_reembed(scope=scope, corpus=target, model_key=model)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if job is None:
            self.stdout.write(f"corpus {corpus!r} already uses {model}")
            return
        self.stdout.write(f"re-embed job {job.pk} queued: {target.model_key} -> {model}")
        while wait:
            with activate(scope):
                job = IngestJob.objects.for_scope(scope).get(pk=job.pk)
            if job.status in (JobStatus.DONE, JobStatus.FAILED):
                self.stdout.write(f"job {job.pk} {job.status} ({job.stage}) {job.error}".rstrip())
                break
            time.sleep(1)
