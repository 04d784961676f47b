"""manage.py evaluate: measured answer quality on a question set with known evidence.

    manage.py evaluate --limit 100 --strategies classic,pipeline,agentic,auto,search:keyword,facets:keyword
    manage.py evaluate --suite --limit 100 --out /tmp/suite

Ingests the corpus JSONL into an evaluation tenant through the real pipeline (reused when
unchanged), runs every question through every strategy and writes report.json, report.md and
PNG charts to --out. Tenants can pass their own --corpus and --questions (docs/evaluation.md).
--conversation also asks each question as the second turn of a thread (a first turn about the
thing the question names, then the question referring back to it with a pronoun) and reports its
evidence recall beside the standalone question's, on the same questions (bench.evaluation.conversation).
--suite runs every set of the suite registry (bench.evaluation.suite), each in its own tenant and
corpus, into one report: a summary table (set x strategy) and each set's tables; each set's own
report (and charts) goes to --out/<set>/.
--half fit|report keeps one half of every question set (bench.evaluation.dataset.half_of: a stable
hash of the qid); --limit then samples within it. Rules and thresholds are chosen on fit, figures
reported on report; the report says which half ran.
--history also runs each agent strategy as history:<strategy>: a question that carries `history`
asked as the last turn of that conversation (bench.evaluation.history), beside it asked alone.
--xquad-dir DIR runs XQuAD instead (questions in other languages over English paragraphs,
bench.evaluation.xquad): evidence recall per embedding model, search mode, language and half.
--summaries N runs the summarisation set instead ("Summarise the document '<title>'" for N documents
of each of --sets, default emanual,mtrag; bench.evaluation.summarisation): gold document cited,
verified statements, coverage.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from agents.providers import get_provider
from bench.evaluation.conversation import conversation_figures, split_question
from bench.evaluation.dataset import HALVES, DatasetError, load_corpus, load_questions, sample_questions, select_half
from bench.evaluation.environment import run_environment
from bench.evaluation.history import history_figures
from bench.evaluation.metrics import K_CONTEXT
from bench.evaluation.report import write_report, write_suite_report
from bench.evaluation.runner import (
    AGENT_STRATEGIES,
    CONVERSATION,
    HISTORY,
    EvaluationError,
    check_strategies,
    ensure_corpus,
    facet_sources,
    run_one,
)
from bench.evaluation.suite import DEFAULT_SET, CorpusProfile, profile_for, select
from bench.evaluation.summarisation import run_summaries_command
from bench.evaluation.summary import QuestionResult, summarise
from bench.evaluation.xquad import run_xquad_command
from kb.ingest.queue import run_jobs_here_without_a_worker

DEFAULT_STRATEGIES = "classic,pipeline,agentic,auto"


class Command(BaseCommand):
    help = "Evaluate answer quality: retrieval (official MultiHop-RAG metrics), evidence recall, abstention, citations, cost."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--corpus", type=Path, default=DEFAULT_SET.corpus,
                            help="corpus JSONL (doc_id, title, text, metadata); a suite set's corpus gets that set's profile")
        parser.add_argument("--questions", type=Path, default=DEFAULT_SET.questions, help="question JSONL")
        parser.add_argument("--suite", action="store_true",
                            help="run every set of the suite registry (bench/evaluation/suite.py), each in its own tenant "
                                 "and corpus, into one report; --limit then samples per set; --corpus, --questions, "
                                 "--tenant and --corpus-name do not apply")
        parser.add_argument("--sets", default=None, metavar="NAME,NAME",
                            help="the suite's sets to run (implies --suite; default: all of them)")
        parser.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                            help="comma-separated: classic, pipeline, agentic, auto, search:<mode>, facets:<mode> "
                                 "(mode: keyword|vector|hybrid)")
        parser.add_argument("--conversation", action="store_true",
                            help="also run each agent strategy as conversation:<strategy> (the question as a thread's second "
                                 "turn); only questions that can be split into two turns are evaluated")
        parser.add_argument("--history", action="store_true",
                            help="also run each agent strategy as history:<strategy>: a question asked as the last turn of the "
                                 "conversation its line gives (`history`), the earlier turns replayed as the thread")
        parser.add_argument("--half", choices=HALVES, default=None,
                            help="keep one half of each question set, by a stable hash of the qid: fit (to choose rules and "
                                 "thresholds on) or report (to report figures on); default: every question")
        parser.add_argument("--provider", default=None, help="agent provider (default: the configured one, offline unless set)")
        parser.add_argument("--limit", type=int, default=None, help="evaluate a seeded sample of this many questions, stratified by type")
        parser.add_argument("--seed", type=int, default=13)
        parser.add_argument("--out", type=Path, default=Path(settings.BASE_DIR) / "docs" / "evaluation")
        parser.add_argument("--tenant", default="evaluation", help="slug of the evaluation tenant (created on first use)")
        parser.add_argument("--corpus-name", default=None, help="corpus name inside the tenant (default: the corpus file's stem)")
        parser.add_argument("--no-sentence-vectors", action="store_true",
                            help="ingest without sentence vectors (searches then skip the sentence re-rank; for comparison)")
        parser.add_argument("--chunk-tokens", type=int, default=None, metavar="N",
                            help="chunk target size in tokens for a corpus created by this run (default: the product's)")
        parser.add_argument("--embedding-model", default=None, metavar="MODEL:DIM",
                            help="embedding model key for a corpus created by this run, e.g. all-mpnet-base-v2:768 "
                                 "(default: GROUNDED_EMBEDDER's, minilm-l6-v2:384 unless set)")
        parser.add_argument("--records", action="store_true", help="also write per-question results (ids and numbers) to records.jsonl")
        parser.add_argument("--no-charts", action="store_true")
        parser.add_argument("--shard", default=None, metavar="I/N",
                            help="run only every N-th question starting at I (0-based); records are written for --merge")
        parser.add_argument("--merge", nargs="+", type=Path, default=None, metavar="DIR",
                            help="do not run: combine the records.jsonl of these shard output dirs into one report in --out")
        parser.add_argument("--xquad-dir", type=Path, default=None, metavar="DIR",
                            help="do not run a question set: evidence recall@5/@10 of XQuAD questions (xquad.<lang>.json in DIR) "
                                 "over its English paragraphs, per --embedding-model (comma-separated keys; default MiniLM and "
                                 "multilingual-e5-small-q4), written to --out/xquad (bench/evaluation/xquad.py)")
        parser.add_argument("--summaries", type=int, default=0, metavar="N",
                            help="do not run a question set: the summarisation set, N documents per set of --sets (default "
                                 "emanual,mtrag), each asked 'Summarise the document ...' with --strategies, written to "
                                 "--out/summaries (bench/evaluation/summarisation.py)")
        parser.add_argument("--xquad-languages", default="en,de,es,ru", metavar="LANG,LANG",
                            help="XQuAD question languages for --xquad-dir")
        parser.add_argument("--xquad-modes", default="vector,hybrid", metavar="MODE,MODE",
                            help="search modes for --xquad-dir (keyword, vector, hybrid)")

    def handle(self, *args: Any, **opts: Any) -> None:
        run_jobs_here_without_a_worker()  # no scripts/run beside this command: its jobs run here
        if opts["xquad_dir"] is not None:
            return run_xquad_command(self, opts)
        if opts["summaries"]:
            try:
                strategies = [s for s in _strategies(opts) if s in AGENT_STRATEGIES]
            except (EvaluationError, ValueError) as exc:
                raise CommandError(str(exc)) from exc
            return run_summaries_command(self, opts, strategies)
        if opts["merge"]:
            return self._merge(opts)
        if opts["suite"] or opts["sets"]:
            return self._suite(opts)
        try:
            strategies = _strategies(opts)
        except (EvaluationError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        corpus_name = opts["corpus_name"] or opts["corpus"].stem
        meta, results = self._run_set(opts, strategies, corpus=opts["corpus"], questions_file=opts["questions"],
                                      tenant=opts["tenant"], corpus_name=corpus_name, profile=profile_for(opts["corpus"]),
                                      out=opts["out"], records=opts["records"] or bool(opts["shard"]))
        self._write(opts, meta, results, records=False)  # already written

    def _suite(self, opts: dict) -> None:
        """Every selected set of the registry, one after the other, into one report (and one per set)."""
        if opts["shard"]:
            raise CommandError("--suite runs whole sets: --shard applies to one set (--corpus/--questions)")
        try:
            strategies = _strategies(opts)
            sets = select(opts["sets"])
        except (EvaluationError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        started = time.perf_counter()
        reports: dict[str, dict] = {}
        skipped: dict[str, str] = {}
        for eval_set in sets:
            if missing := eval_set.missing():
                skipped[eval_set.name] = "absent: " + ", ".join(str(p) for p in missing)
                self.stderr.write(f"set {eval_set.name}: skipped, {skipped[eval_set.name]}")
                continue
            self.stderr.write(f"set {eval_set.name}: {eval_set.description}")
            out = opts["out"] / eval_set.name
            meta, results = self._run_set(opts, strategies, corpus=eval_set.corpus, questions_file=eval_set.questions,
                                          tenant=eval_set.tenant, corpus_name=eval_set.corpus_name, profile=eval_set.profile,
                                          out=out, records=opts["records"], set_name=eval_set.name)
            meta["paper_anchors"] = eval_set.paper_anchors
            report = {"meta": meta, "summary": summarise(results)}
            write_report(report, out, with_charts=not opts["no_charts"])
            reports[eval_set.name] = report
        if not reports:
            raise CommandError("no set of the suite could run: " + "; ".join(f"{k} {v}" for k, v in skipped.items()))
        suite = {"meta": {"command": _command_line(), "sets": list(reports), "skipped": skipped, "strategies": strategies,
                          "limit": opts["limit"], "seed": opts["seed"], "half": opts["half"],
                          "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                          "elapsed_s": round(time.perf_counter() - started, 1), "environment": run_environment()},
                 "sets": reports}
        paths = write_suite_report(suite, opts["out"])
        self.stdout.write((opts["out"] / "report.md").read_text(encoding="utf-8"))
        self.stderr.write("wrote " + ", ".join(str(p) for p in paths) + f" and a report per set in {opts['out']}/<set>/")

    def _run_set(self, opts: dict, strategies: list[str], *, corpus: Path, questions_file: Path, tenant: str, corpus_name: str,
                 profile: CorpusProfile | None, out: Path, records: bool, set_name: str | None = None) -> tuple[dict, list[QuestionResult]]:
        """Ingest one corpus (reused when unchanged) and run its (sampled) questions through every strategy."""
        try:
            docs = load_corpus(corpus)
            questions = select_half(load_questions(questions_file, docs), opts["half"])
            _check_half(self.stderr.write, questions, opts["half"])
            if any(s.startswith(HISTORY + ":") for s in strategies):
                self.stderr.write(f"history mode: {sum(bool(q.history) for q in questions)} of {len(questions)} questions carry "
                                  "earlier turns; the others are asked alone under history:<strategy> too")
            turns = {}
            if any(s.startswith(CONVERSATION + ":") for s in strategies):
                by_id = {d.doc_id: d for d in docs}
                turns = {q.qid: t for q in questions if q.answerable and (t := split_question(q, by_id)) is not None}
                self.stderr.write(f"conversation mode: {len(turns)} of {sum(q.answerable for q in questions)} answerable "
                                  "questions can be asked as a follow-up; only those are evaluated")
                questions = [q for q in questions if q.qid in turns]
            questions = sample_questions(questions, limit=opts["limit"], seed=opts["seed"])
            questions = _shard(questions, opts["shard"])
        except (DatasetError, OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        if not strategies or not questions:
            raise CommandError("nothing to evaluate: no strategies or no questions")
        started = time.perf_counter()
        self.stderr.write(f"ingesting {len(docs)} documents into tenant {tenant!r}, corpus {corpus_name!r} (unchanged ones are reused)")
        try:
            ev = ensure_corpus(docs, tenant_slug=tenant, corpus_name=corpus_name,
                               sentence_vectors=not opts["no_sentence_vectors"], chunk_tokens=opts["chunk_tokens"],
                               embedding_model=opts["embedding_model"], profile=profile,
                               progress=lambda it: tqdm(it, total=len(docs), desc="ingest", unit="doc", file=sys.stderr))
        except EvaluationError as exc:
            raise CommandError(str(exc)) from exc
        ingest_s = time.perf_counter() - started

        provider = get_provider(opts["provider"])
        generates_text = provider.name != "offline"
        sources = facet_sources(ev)
        results = []
        out.mkdir(parents=True, exist_ok=True)
        # Records are appended as they come, so an interrupted run can still be merged into a report.
        with tqdm(total=len(questions) * len(strategies), desc="evaluate", unit="run", file=sys.stderr) as bar, \
                (out / "records.jsonl").open("w", encoding="utf-8") if records else nullcontext() as sink:
            for q in questions:
                for strategy in strategies:
                    results.append(run_one(ev, q, strategy, provider=opts["provider"], generates_text=generates_text, sources=sources,
                                           turns=turns.get(q.qid)))
                    if sink is not None:
                        sink.write(json.dumps(results[-1].as_dict()) + "\n")
                        sink.flush()
                    bar.update(1)
        meta = {
            "command": _command_line(), "set": set_name, "tenant": tenant, "corpus_name": corpus_name,
            "corpus_profile": profile.fields() if profile else None,
            "corpus": str(corpus), "questions_file": str(questions_file), "corpus_documents": len(docs),
            "documents_ingested_now": ev.uploaded, "ingest_s": round(ingest_s, 1), "questions": len(questions),
            "answerable": sum(q.answerable for q in questions), "strategies": strategies,
            "provider": f"{provider.name}/{provider.model}", "embedding_model": ev.model_key,
            "context_chunks": K_CONTEXT, "seed": opts["seed"], "limit": opts["limit"], "shard": opts["shard"],
            "half": opts["half"], "with_history": sum(bool(q.history) for q in questions),
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"), "elapsed_s": round(time.perf_counter() - started, 1),
            "environment": run_environment(),
        }
        if turns:
            meta["conversation"] = conversation_figures(results)
        if any(s.startswith(HISTORY + ":") for s in strategies):
            meta["history"] = history_figures(results)
        return meta, results

    def _merge(self, opts: dict) -> None:
        """One report from shard outputs: results concatenated, cost figures recomputed over all of them.
        Question counts are of distinct questions: outputs of other strategies over the same questions
        (a run of classic and one of auto, merged) do not count them twice."""
        results: list[QuestionResult] = []
        metas = []
        for folder in opts["merge"]:
            try:
                lines = (folder / "records.jsonl").read_text(encoding="utf-8").splitlines()
                shard = [QuestionResult.from_dict(json.loads(line)) for line in lines if line.strip()]
                report = folder / "report.json"
                metas.append(json.loads(report.read_text(encoding="utf-8"))["meta"] if report.exists() else _partial_meta(folder, shard))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CommandError(f"{folder}: not a shard output ({exc})") from exc
            results.extend(shard)
        meta = {**metas[0], "command": _command_line(), "shard": None, "merged_from": [m.get("shard") for m in metas],
                "questions": len({r.qid for r in results}), "answerable": len({r.qid for r in results if r.answerable}),
                "elapsed_s": max(m["elapsed_s"] for m in metas), "shard_commands": [m["command"] for m in metas],
                "finished_at": datetime.now(UTC).isoformat(timespec="seconds")}
        environments = [m.get("environment") for m in metas]
        if any(e != environments[0] for e in environments):  # shards run on other code or machines: not one run's figures
            meta["environment"] = None
            meta["shard_environments"] = environments
            self.stderr.write("warning: the shards ran on different code, libraries or CPUs (report.json: shard_environments)")
        self._write(opts, meta, results, records=opts["records"])

    def _write(self, opts: dict, meta: dict, results: list[QuestionResult], *, records: bool) -> None:
        report = {"meta": meta, "summary": summarise(results)}
        paths = write_report(report, opts["out"], with_charts=not opts["no_charts"])
        if records:
            with (opts["out"] / "records.jsonl").open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r.as_dict()) + "\n" for r in results)
        self.stdout.write((opts["out"] / "report.md").read_text(encoding="utf-8"))
        self.stderr.write("wrote " + ", ".join(str(p) for p in paths))


def _partial_meta(folder: Path, results: list[QuestionResult]) -> dict:
    """Meta of an interrupted shard (records but no report): counts from its complete questions."""
    qids = {r.qid for r in results}
    answerable = {r.qid for r in results if r.answerable}
    return {"command": f"interrupted shard in {folder}", "questions": len(qids), "answerable": len(answerable), "elapsed_s": 0.0,
            "shard": f"partial:{folder.name}", "corpus_documents": None, "provider": "?", "context_chunks": K_CONTEXT, "seed": None}


def _strategies(opts: dict) -> list[str]:
    """The strategies to run: --strategies, each agent strategy followed by its conversation:/history:
    variant when --conversation/--history asks for it."""
    names = [s.strip() for s in opts["strategies"].split(",") if s.strip()]
    for flag, kind in (("conversation", CONVERSATION), ("history", HISTORY)):
        if not opts.get(flag):
            continue
        names = [v for s in names for v in ([s, f"{kind}:{s}"] if s in AGENT_STRATEGIES else [s])]
        if not any(n.startswith(kind + ":") for n in names):
            raise EvaluationError(f"--{flag} needs an agent strategy (" + ", ".join(AGENT_STRATEGIES) + ")")
    return check_strategies(dict.fromkeys(names))


def _check_half(warn, questions: list, half: str | None) -> None:
    """Say when the half run lacks answerable or unanswerable questions (its abstention figures would be empty)."""
    if half is None:
        return
    answerable = sum(q.answerable for q in questions)
    if not answerable or answerable == len(questions):
        warn(f"half {half}: {answerable} answerable and {len(questions) - answerable} unanswerable questions; "
             "one of its abstention figures is empty")


def _shard(questions: list, spec: str | None) -> list:
    if not spec:
        return questions
    index, _, count = spec.partition("/")
    i, n = int(index), int(count)
    if not 0 <= i < n:
        raise ValueError(f"--shard {spec}: expected I/N with 0 <= I < N")
    return questions[i::n]

def _command_line() -> str:
    """How this run was started, for the report (reproducibility)."""
    argv = sys.argv[1:]
    return "manage.py " + " ".join(argv) if argv and argv[0] == "evaluate" else "manage.py evaluate"
