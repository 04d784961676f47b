"""Write an evaluation's figures: report.json, report.md and PNG charts. Pure: no ORM.

Only figures and ids are written, never question or corpus text, so a report can be committed
beside a benchmark whose texts may not be redistributed.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.evaluation.environment import describe
from bench.evaluation.summary import ALL

# The paper's Table 5 (Tang & Yang 2024), best rows, for context in the Markdown report.
PAPER_TABLE5 = [
    ("bge-large-en-v1.5", 0.4298, 0.3423, 0.6718, 0.5221),
    ("voyage-02 + bge-reranker-large", 0.5860, 0.4795, 0.7467, 0.6625),
    ("text-embedding-ada-002 + bge-reranker-large", 0.5477, 0.4625, 0.7059, 0.6169),
]
TYPE_ORDER = ("inference_query", "comparison_query", "temporal_query", "null_query")
RETRIEVAL_COLUMNS = [("evidence_recall", "Evidence recall"), ("hits_at_10", "Hits@10"), ("hits_at_4", "Hits@4"),
                     ("mrr_at_10", "MRR@10"), ("map_at_10", "MAP@10")]


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _types(summary: dict) -> list[str]:
    seen = {t for figures in summary.values() for t in figures if t != ALL}
    return [t for t in TYPE_ORDER if t in seen] + sorted(seen - set(TYPE_ORDER))


def markdown(report: dict, *, title: str = "# Evaluation report", level: int = 2) -> str:
    """The Markdown tables of a report (overall, per question type, answers and cost, the paper's
    anchors); `level` is the heading level of its sections (a suite nests a set's report one deeper)."""
    summary = report["summary"]
    meta = report["meta"]
    h = "#" * level
    lines = [
        title + _half_heading(meta.get("half")), "",
        f"- command: `{meta['command']}`",
        f"- questions: {meta['questions']} ({meta['answerable']} with gold evidence), corpus: {meta['corpus_documents']} documents, "
        f"provider: {meta['provider']}, embedder: {meta.get('embedding_model') or 'minilm-l6-v2:384'}, "
        f"final context: {meta['context_chunks']} chunks, seed {meta['seed']}",
        *([f"- tenant `{meta['tenant']}`, corpus `{meta['corpus_name']}`, profile {_profile(meta.get('corpus_profile'))}"]
          if meta.get("tenant") else []),
        *([_half_line(meta["half"])] if meta.get("half") else []),
        f"- run at {meta['finished_at']} in {meta['elapsed_s']:.0f} s", *_ran_on(meta), "",
        f"{h} Retrieval (answerable questions; official MultiHop-RAG matching)", "",
        "| strategy | " + " | ".join(label for _, label in RETRIEVAL_COLUMNS) + " | null → not enough evidence |",
        "|---" * (len(RETRIEVAL_COLUMNS) + 2) + "|",
    ]
    for strategy, figures in summary.items():
        f = figures[ALL]
        # Evidence recall to 4 places: targets are set on it, and 3 would round 0.7497 up to 0.750.
        lines.append(f"| {strategy} | " + " | ".join(_fmt(f[key], 4 if key == "evidence_recall" else 3) for key, _ in RETRIEVAL_COLUMNS)
                     + f" | {_fmt(f['null_abstained'])} |")
    lines += ["", f"{h} Evidence recall / Hits@10 by question type", ""]
    types = _types(summary)
    lines += ["| strategy | " + " | ".join(types) + " |", "|---" * (len(types) + 1) + "|"]
    for strategy, figures in summary.items():
        cells = []
        for t in types:
            f = figures.get(t)
            if f is None:
                cells.append("–")
            elif f["answerable"]:
                cells.append(f"{_fmt(f['evidence_recall'])} / {_fmt(f['hits_at_10'])}")
            else:
                cells.append(f"abstained {_fmt(f['null_abstained'])}")
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    lines += ["", f"{h} Answers, citations and cost", "",
              "| strategy | all facts | answer containment | answer precision | quotes/answer | accuracy (lenient) | "
              "accuracy (strict) | answerable abstained | citations verified | unverified | "
              "model calls/q | tool calls/q | tokens/q | latency p50 ms | p95 ms | errors |",
              "|---" * 16 + "|"]
    for strategy, figures in summary.items():
        f = figures[ALL]
        lines.append(f"| {strategy} | {_fmt(f.get('all_facts'))} | {_fmt(f.get('answer_containment'))} | "
                     f"{_fmt(f.get('answer_precision'))} | {_fmt(f.get('quotes_per_answer'), 2)} | "
                     f"{_fmt(f['accuracy_lenient'])} | {_fmt(f['accuracy_strict'])} | {_fmt(f['answerable_abstained'])} | "
                     f"{_fmt(f['citations_verified_share'])} | {f['citations_unverified']} | {_fmt(f['model_calls_per_question'], 2)} | "
                     f"{_fmt(f['tool_calls_per_question'], 2)} | {_fmt(f['tokens_per_question'], 0)} | {_fmt(f['latency_ms_p50'], 0)} | "
                     f"{_fmt(f['latency_ms_p95'], 0)} | {f['errors']} |")
    lines += ["", "All facts: answerable questions with every gold fact in the final context. Answer containment: the gold "
              "short answer in the answer (SQuAD-normalised; a yes/no answer must be stated), over answerable questions. "
              "Answer precision: quoted sentences citing a chunk of a document that holds gold evidence. Accuracy is "
              "shown only for providers that generate answers (the offline provider quotes sentences)."]
    if meta.get("conversation"):
        lines += ["", f"{h} Conversation mode: the question as a thread's second turn", "",
                  "| strategy | questions | second-turn evidence recall | standalone evidence recall | difference (points) | "
                  "follow-up resolved back to the name |", "|---" * 6 + "|"]
        lines += [f"| {s} | {c['questions']} | {_fmt(c['second_turn_recall'], 4)} | {_fmt(c['standalone_recall'], 4)} | "
                  f"{c['difference_points']:+.1f} | {_fmt(c['resolved_back'])} |" for s, c in meta["conversation"].items()]
        lines += ["", "Each question is asked after a first turn about the thing it names (\"Tell me about <name>.\"), "
                  "with that name replaced by a pronoun; the follow-up is resolved against the thread before it is searched "
                  "(bench.evaluation.conversation)."]
    if meta.get("history"):
        lines += ["", f"{h} History mode: the question as its conversation's last turn", "",
                  "| strategy | questions with history | evidence recall (history / alone) | null declined (history / alone) | "
                  "answerable abstained (history / alone) |", "|---" * 5 + "|"]
        lines += [f"| {s} | {c['questions']} | {_fmt(c['evidence_recall_history'], 4)} / {_fmt(c['evidence_recall_alone'], 4)} | "
                  f"{_fmt(c['null_declined_history'])} / {_fmt(c['null_declined_alone'])} | "
                  f"{_fmt(c['answerable_abstained_history'])} / {_fmt(c['answerable_abstained_alone'])} |"
                  for s, c in meta["history"].items()]
        lines += ["", "The set's earlier turns (its users' questions and the answers they were given) are the thread the "
                  "last turn is made standalone against (bench.evaluation.history); \"alone\" is the same question without them."]
    if meta.get("paper_anchors", True):  # a suite set that is not MultiHop-RAG says False
        lines += ["", f"{h} Paper anchors (MultiHop-RAG Table 5, 256-token chunks, top-10 retrieval, all 2,255 non-null questions)", "",
                  "| embedding | MRR@10 | MAP@10 | Hits@10 | Hits@4 |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {a} | {b} | {c} | {d} |" for name, a, b, c, d in PAPER_TABLE5]
    if report.get("charts"):
        lines += ["", f"{h} Charts", ""] + [f"![{name}]({name})" for name in report["charts"]]
    return "\n".join(lines) + "\n"


def _half_heading(half: str | None) -> str:
    return f" ({half} half)" if half else ""


def _half_line(half: str) -> str:
    return (f"- half: `{half}` of each question set (sha256 of the qid, first byte even = fit); rules and thresholds "
            "are chosen on `fit`, figures reported on `report`")


def _ran_on(meta: dict) -> list[str]:
    """The report's "ran on:" line (bench.evaluation.environment), none when the run did not record one."""
    return [f"- ran on: {describe(meta['environment'])}"] if meta.get("environment") else []


def _profile(profile: dict | None) -> str:
    if not profile:
        return "as stored"
    facets = ", ".join(profile.get("facet_keys") or []) or "discovered"
    return f"date key `{profile.get('date_key') or '-'}`, facet keys {facets}, language {profile.get('language')}"


SUITE_COLUMNS = [("evidence_recall", "evidence recall", 4), ("all_facts", "all facts", 3), ("hits_at_4", "Hits@4", 3),
                 ("hits_at_10", "Hits@10", 3), ("null_abstained", "null declined", 3),
                 ("answerable_abstained", "answerable abstained", 3), ("answer_containment", "answer containment", 3),
                 ("answer_precision", "answer precision", 3), ("latency_ms_p50", "latency p50 ms", 0),
                 ("latency_ms_p95", "p95 ms", 0), ("relevance_ms_p50", "relevance model p50 ms", 0),
                 ("relevance_share", "relevance model share of latency", 3)]


def suite_markdown(suite: dict) -> str:
    """One report of a suite run: a summary table (set x strategy), then each set's tables."""
    meta = suite["meta"]
    sample = f"a sample of {meta['limit']} questions per set (seed {meta['seed']})" if meta.get("limit") else "every question"
    lines = ["# Evaluation suite report" + _half_heading(meta.get("half")), "", f"- command: `{meta['command']}`",
             f"- sets: {', '.join(meta['sets'])}; strategies: {', '.join(meta['strategies'])}; {sample}",
             *([_half_line(meta["half"])] if meta.get("half") else []),
             f"- run at {meta['finished_at']} in {meta['elapsed_s']:.0f} s", *_ran_on(meta)]
    if meta.get("skipped"):
        lines += [f"- skipped: {name} ({why})" for name, why in meta["skipped"].items()]
    lines += ["", "## Summary", "", "| set | strategy | questions | " + " | ".join(label for _, label, _ in SUITE_COLUMNS) + " |",
              "|---" * (len(SUITE_COLUMNS) + 3) + "|"]
    for name, report in suite["sets"].items():
        for strategy, figures in report["summary"].items():
            f = figures[ALL]
            lines.append(f"| {name} | {strategy} | {f['questions']} | "
                         + " | ".join(_fmt(f.get(key), digits) for key, _, digits in SUITE_COLUMNS) + " |")
    lines += ["", "Evidence recall, all facts, Hits@4 and Hits@10 over answerable questions (a gold document or passage "
              "counts when any chunk of it is in the context: for document-level gold, evidence recall is gold-passage "
              "recall); null declined over unanswerable ones, answerable abstained over answerable ones (answering "
              "strategies only); answer containment and precision as in each set's answers table (\"–\": does "
              "not apply, e.g. a retrieval-only baseline)."]
    for name, report in suite["sets"].items():
        body = markdown({**report, "charts": []}, title=f"## Set `{name}`", level=3)
        lines += ["", body.rstrip("\n"), "", f"Charts and the JSON of this set: [`{name}/`]({name}/report.md)."]
    return "\n".join(lines) + "\n"


def write_suite_report(suite: dict, out: Path) -> list[Path]:
    """Write a suite's report.json and report.md into `out` (each set's own report is written beside, in out/<set>/)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(suite, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(suite_markdown(suite), encoding="utf-8")
    return [out / "report.json", out / "report.md"]


def charts(summary: dict, out: Path) -> list[str]:
    """PNG charts: evidence recall and Hits@10 by strategy and type; recall against cost."""
    # matplotlib (~0.5 s to import) loads only when charts are drawn; its backend is chosen before pyplot loads.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen (above)

    names: list[str] = []
    strategies = list(summary)
    types = [t for t in _types(summary) if any(summary[s].get(t, {}).get("answerable") for s in strategies)] + [ALL]
    for metric, label in (("evidence_recall", "Evidence recall"), ("hits_at_10", "Hits@10")):
        fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(types) * max(1, len(strategies)) / 3), 4))
        width = 0.8 / max(1, len(strategies))
        for i, strategy in enumerate(strategies):
            values = [summary[strategy].get(t, {}).get(metric) or 0.0 for t in types]
            ax.bar([x + i * width for x in range(len(types))], values, width, label=strategy)
        ax.set_xticks([x + width * (len(strategies) - 1) / 2 for x in range(len(types))], [t.replace("_query", "") for t in types])
        ax.set_ylim(0, 1)
        ax.set_ylabel(label)
        ax.set_title(f"{label} by strategy and question type")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        name = f"{metric}_by_type.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (cost, label) in zip(axes, (("tool_calls_per_question", "searches per question"),
                                        ("latency_ms_p50", "latency p50 (ms)")), strict=True):
        for strategy in strategies:
            f = summary[strategy][ALL]
            if f["evidence_recall"] is None or f[cost] is None:
                continue
            ax.scatter([f[cost]], [f["evidence_recall"]], s=40)
            ax.annotate(strategy, (f[cost], f["evidence_recall"]), fontsize=7, xytext=(4, 4), textcoords="offset points")
        ax.set_xlabel(label)
        ax.set_ylabel("evidence recall")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    fig.suptitle("Evidence recall against cost")
    fig.tight_layout()
    fig.savefig(out / "recall_vs_cost.png", dpi=110)
    plt.close(fig)
    names.append("recall_vs_cost.png")
    return names


def write_report(report: dict, out: Path, *, with_charts: bool = True) -> list[Path]:
    """Write report.json, report.md and (optionally) the charts into `out`; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    report = dict(report)
    report["charts"] = charts(report["summary"], out) if with_charts else []
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    return [out / "report.json", out / "report.md", *(out / c for c in report["charts"])]
