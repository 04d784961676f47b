"""Where the pipeline's gold facts are lost, from the searches an evaluation run recorded.

    GROUNDED_DATA_DIR=/tmp/eval-pg .venv/bin/python bench/context_replay.py [--since ISO] [--until ISO]

Reads the pipeline runs of the evaluation tenant (the latest run per question inside the window;
default: the last 24 hours) and, for each answerable question of ../shared/eval, the ranked lists
its searches returned (hits past the tool output budget included, as the step's output names
them). It then merges those lists again with the pipeline's own `_merged` and prints: the recorded
and the replayed evidence recall (equal when the replay is faithful), the pool ceiling (every
chunk any search returned), and where the facts that were in the pool but not in the 10-chunk
context sat: how many lists held their chunk and at what best rank. A merge variant can be tried
by editing `replayed_context` and re-running (seconds for the full dev set instead of a 16-minute
run); judge decisions do not follow the variant, so confirm a winner with a real run.

Skips (exit 0) when ../shared/eval is absent. Nothing is written.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
EVAL = ROOT.parent / "shared" / "eval"
K_CONTEXT = 10
_OVERFLOW = re.compile(r"past the output budget: ([^;]*)")


# Date arguments of a search: today's names, and the ones traces recorded before issue 28 renamed them.
_DATE_ARGS = ("date_after", "date_before", "published_after", "published_before")

def searched_lists(steps: list[dict]) -> list[dict]:
    """Each search step's ranked chunk ids (with those past the output budget at their ranks), its narrowing, its round."""
    from agents.loop import MAX_SUBQUERIES, parse_json_object

    out, round_no, planned = [], 1, {}
    for s in steps:
        if s["kind"] == "model_call" and s["name"] in ("rewrite", "judge"):
            round_no += s["name"] == "judge"
            # The round's narrowed sub-queries, as the pipeline counts them for their share (a
            # repeated follow-up counts but is not searched again)
            items = parse_json_object(s["output"] or "").get("queries" if s["name"] == "rewrite" else "missing") or []
            planned[round_no] = sum(1 for i in items[:MAX_SUBQUERIES] if isinstance(i, dict) and
                                    (i.get("sources") or i.get("metadata") or any(i.get(k) for k in _DATE_ARGS)))
        if s["kind"] != "tool_call" or s["name"] != "search":
            continue
        ids = list(s["chunk_ids"])
        if m := _OVERFLOW.search(s["output"] or ""):
            # "c:7079 (#4)": the hit's rank in the search (traces before ranks were recorded: appended)
            past = [(int(cid), int(rank) if rank else None) for cid, rank in re.findall(r"c:(\d+)(?: \(#(\d+)\))?", m.group(1))]
            for cid, rank in sorted(past, key=lambda p: p[1] or len(ids) + len(past)):
                ids.insert(rank - 1 if rank else len(ids), cid)
        a = s["arguments"] or {}
        narrowed = bool(a.get("metadata") or any(a.get(k) for k in _DATE_ARGS))
        retry = bool(out and narrowed and out[-1]["narrowed"] and not out[-1]["ids"] and out[-1]["query"] == a.get("query"))
        out.append({"ids": ids, "narrowed": narrowed, "round": round_no, "query": a.get("query"), "retry": retry})
    # A narrowed search's share of the context (agents.loop._share over the round's narrowed sub-queries)
    for r in {f["round"] for f in out}:
        n = planned.get(r) or sum(1 for f in out if f["round"] == r and f["narrowed"] and not f["retry"])
        for f in out:
            if f["round"] == r:
                f["share"] = min(K_CONTEXT, max(5, -(-K_CONTEXT // max(n, 1))))
    return out


def replayed_context(lists: list[dict], texts: dict[int, tuple[str, str]]) -> list[int]:
    """The pipeline's merge (agents.loop._context_order): narrowed searches' shares fused first,
    then the others, then the rest of the narrowed searches' lists.
    `texts`: chunk id -> (text, content hash)."""
    from agents.loop import _context_order

    state = SimpleNamespace(retrieved={c: SimpleNamespace(text=texts[c][0], content_hash=texts[c][1])
                                       for found in lists for c in found["ids"] if c in texts},
                            budgets=SimpleNamespace(max_context_chunks=K_CONTEXT))
    return _context_order(state, [(f["ids"], f["share"]) for f in lists if f["narrowed"]],
                          [f["ids"] for f in lists if not f["narrowed"]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    now = dt.datetime.now(dt.UTC)
    parser.add_argument("--since", default=(now - dt.timedelta(days=1)).isoformat())
    parser.add_argument("--until", default=now.isoformat())
    parser.add_argument("--tenant", default="evaluation")
    args = parser.parse_args()
    if not (EVAL / "questions-dev.jsonl").exists():
        print(f"skipped: {EVAL} is absent")
        return 0

    import django

    django.setup()
    from agents.models import Run, RunStep
    from bench.evaluation.dataset import load_corpus, load_questions
    from bench.evaluation.metrics import strip_spaces
    from kb.models import Chunk
    from tenants.models import Tenant
    from tenants.scope import Scope, activate

    questions = load_questions(EVAL / "questions-dev.jsonl", load_corpus(EVAL / "corpus.jsonl"))
    tenant = Tenant.objects.get(slug=args.tenant)
    scope = Scope.system(tenant.id, principal="context-replay")
    with activate(scope):
        texts = {pk: (text, h) for pk, text, h in Chunk.objects.for_scope(scope).values_list("pk", "text", "content_hash")}
        latest: dict[str, int] = {}
        for pk, question in (Run.objects.for_scope(scope)
                             .filter(strategy_requested="pipeline", created_at__gte=args.since, created_at__lte=args.until)
                             .values_list("pk", "question")):
            latest[question] = max(pk, latest.get(question, 0))
        steps: dict[int, list[dict]] = collections.defaultdict(list)
        for s in (RunStep.objects.for_scope(scope).filter(run_id__in=list(latest.values())).order_by("run_id", "ordinal")
                  .values("run_id", "kind", "name", "arguments", "chunk_ids", "output")):
            steps[s["run_id"]].append(s)

    chunks = {pk: (strip_spaces(text), h) for pk, (text, h) in texts.items()}
    totals = collections.Counter()
    by_type: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    lost = collections.Counter()
    for q in questions:
        if not q.answerable or q.question not in latest:
            continue
        run_steps = steps[latest[q.question]]
        facts = list(dict.fromkeys(strip_spaces(g.fact) for g in q.gold if g.fact))
        if not facts:
            continue
        lists = searched_lists(run_steps)
        recorded = next((list(s["arguments"].get("context_chunks", []))[:K_CONTEXT] for s in reversed(run_steps)
                         if s["kind"] == "model_call" and s["name"] == "answer"), [])
        replayed = replayed_context(lists, texts)
        pool = list(dict.fromkeys(c for found in lists for c in found["ids"]))

        def held(ids: list[int], facts: list[str] = facts) -> set[int]:
            return {i for c in ids for i, f in enumerate(facts) if f in chunks.get(c, ("", ""))[0]}

        in_context, in_pool = held(recorded), held(pool)
        row = by_type[q.question_type]
        row[0] += len(in_context) / len(facts)
        row[1] += len(held(replayed)) / len(facts)
        row[2] += 1
        totals["questions"] += 1
        totals["reproduced"] += replayed == recorded
        totals["pool"] += len(pool)
        totals["ceiling"] += len(in_pool) / len(facts)
        for i in in_pool - in_context:
            holder = next(c for c in pool if facts[i] in chunks.get(c, ("", ""))[0])
            ranks = [found["ids"].index(holder) for found in lists if holder in found["ids"]]
            lost[(min(len(ranks), 3), min(ranks) if min(ranks) < 5 else "5+")] += 1

    n = totals["questions"]
    if not n:
        print("no pipeline runs of answerable questions in the window")
        return 1
    print(f"{n} answerable questions; contexts reproduced by the replay: {totals['reproduced']}")
    print("| question type | n | recorded recall | replayed recall |\n|---|---|---|---|")
    for name, (rec, rep, count) in sorted(by_type.items()):
        print(f"| {name} | {count} | {rec / count:.4f} | {rep / count:.4f} |")
    rec_all = sum(r[0] for r in by_type.values()) / n
    rep_all = sum(r[1] for r in by_type.values()) / n
    print(f"| all | {n} | {rec_all:.4f} | {rep_all:.4f} |")
    print(f"\npool: {totals['pool'] / n:.1f} distinct chunks per question; ceiling (every fact the pool holds) {totals['ceiling'] / n:.4f}")
    print(f"facts in the pool but not in the context: {sum(lost.values())}")
    print("| lists holding the chunk (3 = 3+) | best rank | facts |\n|---|---|---|")
    for (lists_n, rank), count in sorted(lost.items(), key=lambda kv: -kv[1]):
        print(f"| {lists_n} | {rank} | {count} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
