"""`manage.py ask "question" --tenant SLUG [--user NAME | --key PUBLIC_ID] [--strategy S] [--provider P] [-v 2]`

Prints each step as it happens, then the answer, its outcome and its sources with verdicts.
Without --user/--key the question is asked with a whole-tenant CLI scope.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from agents.loop import STRATEGIES, StepRecord
from agents.models import Run
from agents.selectors import run_citations
from agents.services import InvalidQuestion, ask
from kb.models import Chunk
from tenants.counters import RetryLater
from tenants.models import ApiKey, Membership, Tenant
from tenants.scope import Scope, activate


class Command(BaseCommand):
    help = "Ask a question over a tenant's knowledge base and print the trace and the answer."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question")
        parser.add_argument("--tenant", required=True, help="Tenant slug.")
        who = parser.add_mutually_exclusive_group()
        who.add_argument("--user", help="Username of a member: ask with their departments.")
        who.add_argument("--key", help="Public id of an API key: ask with its departments.")
        parser.add_argument("--strategy", default="auto", choices=STRATEGIES)
        parser.add_argument("--provider", default=None, help="gemini, openai or offline (default from settings).")

    def handle(self, *args: Any, question: str, tenant: str, user: str | None = None, key: str | None = None, strategy: str = "auto",
               provider: str | None = None, verbosity: int = 1, **options: Any) -> None:
        scope = resolve_scope(tenant, user, key)
        verbose = verbosity >= 2

        def show(step: StepRecord) -> None:
            self.stdout.write(format_step(step, verbose))

        try:
            run = ask(scope=scope, question=question, strategy=strategy, provider=provider, on_step=show)
        except InvalidQuestion as exc:
            raise CommandError(str(exc)) from None
        except RetryLater as exc:  # the tenant's daily run budget is used up (or cannot be counted)
            raise CommandError(f"{exc}; retry in {exc.retry_after} s") from None
        print_run(self.stdout, scope, run)


def resolve_scope(slug: str, user: str | None, key: str | None) -> Scope:
    t = Tenant.objects.filter(slug=slug).first()
    if t is None:
        raise CommandError(f"no tenant with slug {slug!r}")
    with activate(Scope.system(t.id, principal="cli")):
        if user:
            membership = Membership.objects.filter(tenant=t, user__username=user).first()
            if membership is None:
                raise CommandError(f"{user!r} is not a member of {slug!r}")
            return membership.scope()
        if key:
            api_key = ApiKey.objects.filter(tenant=t, public_id=key, revoked_at__isnull=True).first()
            if api_key is None:
                raise CommandError(f"no active key {key!r} in {slug!r}")
            return api_key.scope()
    return Scope(tenant_id=t.id, all_departments=True, role="admin", principal="cli")


def format_step(step: StepRecord, verbose: bool) -> str:
    head = f"  [{step.ordinal:>2}] {step.kind:<10} {step.name:<15} {step.latency_ms:8.1f} ms"
    if step.kind == "model_call":
        calls = step.arguments.get("tool_calls") or []
        detail = (f"-> {len(calls)} tool call(s): " + ", ".join(c["name"] for c in calls)) if calls else \
            f"-> text ({len(step.output)} chars)"
        detail += f"  tokens {step.input_tokens}+{step.output_tokens}"
    else:
        detail = json.dumps(step.arguments, ensure_ascii=False)[:200]
        detail += f" -> {step.error}" if step.error else f" -> {len(step.chunk_ids)} chunk(s) {step.chunk_ids[:8]}"
        if step.cached:
            detail += " (cached: not searched again)"
    line = f"{head}  {detail}"
    if verbose and step.effective_filter:
        line += f"\n        filter: {json.dumps(step.effective_filter, ensure_ascii=False)[:400]}"
    if verbose and step.kind == "model_call" and step.output:
        line += "\n        " + step.output[:600].replace("\n", "\n        ")
    return line


def print_run(out: OutputWrapper, scope: Scope, run: Run) -> None:
    out.write("\n" + run.answer + "\n")
    out.write(f"\noutcome: {run.outcome}   grounded: {run.grounded}   strategy: {run.strategy}   provider: {run.provider}/{run.model}"
              f"   tool calls: {run.tool_calls}   tokens: {run.input_tokens}+{run.output_tokens}   {run.latency_ms:.0f} ms   run #{run.id}")
    if run.error:
        out.write(f"error: {run.error}")
    with activate(scope):
        citations = run_citations(scope, run.id)
        chunks = {c.id: c for c in Chunk.objects.for_scope(scope).filter(id__in=[c.chunk_id for c in citations])
                  .select_related("document")}
    if citations:
        out.write("\nsources:")
    verdicts: dict[int, list[str]] = {}
    for c in citations:
        verdicts.setdefault(c.chunk_id, []).append(c.verdict)
    for chunk_id, marks in verdicts.items():
        chunk = chunks.get(chunk_id)
        where = "(not visible in this scope)"
        if chunk:
            where = chunk.locator if chunk.locator.startswith(chunk.document.title) else f"{chunk.document.title} › {chunk.locator}"
        summary = ", ".join(f"{marks.count(v)}× {v}" for v in sorted(set(marks)))
        out.write(f"  [c:{chunk_id}] {summary:<16} {where}")
