"""`manage.py reap_jobs --older-than 600`: resend ingestion jobs whose worker died or whose message was lost.

Safe to run any time (e.g. from cron or Celery beat as kb.reap_stuck_jobs): a job that is still
alive holds its lease, and the resent message finds it busy and does nothing.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from kb.ingest import resume_stuck_jobs


class Command(BaseCommand):
    help = "Re-enqueue running jobs with a stale heartbeat and queued jobs never started (all tenants)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=float, default=600, help="seconds without a heartbeat (default 600)")

    def handle(self, *args: Any, older_than: float, **options: Any) -> None:
        resent = resume_stuck_jobs(older_than=older_than)
        self.stdout.write(f"resent {len(resent)} job(s)" + (f": {', '.join(map(str, resent))}" if resent else ""))
