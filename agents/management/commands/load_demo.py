"""`manage.py load_demo`: load the Kestrel Analytics demo tenant and answer the demo question."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.demo import DEMO_QUESTION, demo_scope, load_demo
from agents.management.commands.ask import print_run
from agents.services import ask
from kb.ingest.queue import run_jobs_here_without_a_worker


class Command(BaseCommand):
    help = "Load the demo tenant (idempotent) and answer a multi-part question with verified citations."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-ask", action="store_true", help="Only load the corpus.")
        parser.add_argument("--provider", default=None, help="gemini, openai or offline (default from settings).")
        parser.add_argument("--strategy", default="auto")
        parser.add_argument("--wait", type=float, default=300.0, help="Seconds to wait for ingestion.")

    def handle(self, *args: Any, no_ask: bool = False, provider: str | None = None, strategy: str = "auto", wait: float = 300.0,
               **options: Any) -> None:
        run_jobs_here_without_a_worker()  # no scripts/run beside this command: its jobs run here
        tenant = load_demo(wait_seconds=wait, log=self.stdout.write)
        self.stdout.write(f"Demo tenant {tenant.slug!r} ready (users: ada = Engineering, sam = Sales).")
        if no_ask:
            return
        scope = demo_scope(tenant, "ada")
        self.stdout.write(f"\nQ ({scope.principal}, Engineering): {DEMO_QUESTION}\n")
        run = ask(scope=scope, question=DEMO_QUESTION, strategy=strategy, provider=provider)
        print_run(self.stdout, scope, run)
