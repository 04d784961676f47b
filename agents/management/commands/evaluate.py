"""manage.py evaluate: measured answer quality on a question set with known evidence.

    manage.py evaluate --limit 100 --strategies classic,pipeline,agentic,auto,search:keyword,facets:keyword

Ingests the corpus JSONL into an evaluation tenant through the real pipeline (reused when
unchanged), runs every question through every strategy and writes report.json, report.md and
PNG charts to --out. Tenants can pass their own --corpus and --questions (docs/evaluation.md).
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.evaluation.dataset import DatasetError, load_corpus, load_questions, sample_questions
from agents.evaluation.metrics import K_CONTEXT
from agents.evaluation.report import write_report
from agents.evaluation.runner import EvaluationError, check_strategies, ensure_corpus, facet_sources, run_one
from agents.evaluation.summary import QuestionResult, summarise

SHARED_EVAL = Path(settings.BASE_DIR).parent / "shared" / "eval"
DEFAULT_STRATEGIES = "classic,pipeline,agentic,auto"


class Command(BaseCommand):
    help = "Evaluate answer quality: retrieval (official MultiHop-RAG metrics), evidence recall, abstention, citations, cost."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--corpus", type=Path, default=SHARED_EVAL / "corpus.jsonl",
                            help="corpus JSONL (doc_id, title, text, metadata)")
        parser.add_argument("--questions", type=Path, default=SHARED_EVAL / "questions-dev.jsonl", help="question JSONL")
        parser.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                            help="comma-separated: classic, pipeline, agentic, auto, search:<mode>, facets:<mode> "
                                 "(mode: keyword|vector|hybrid)")
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

    def handle(self, *args, **opts) -> None:
        if opts["merge"]:
            return self._merge(opts)
        from tqdm import tqdm

        try:
            strategies = check_strategies(s.strip() for s in opts["strategies"].split(",") if s.strip())
            docs = load_corpus(opts["corpus"])
            questions = sample_questions(load_questions(opts["questions"], docs), limit=opts["limit"], seed=opts["seed"])
            questions = _shard(questions, opts["shard"])
        except (EvaluationError, DatasetError, OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        if not strategies or not questions:
            raise CommandError("nothing to evaluate: no strategies or no questions")
        started = time.perf_counter()
        self.stderr.write(f"ingesting {len(docs)} documents into tenant {opts['tenant']!r} (unchanged ones are reused)")
        try:
            ev = ensure_corpus(docs, tenant_slug=opts["tenant"], corpus_name=opts["corpus_name"] or opts["corpus"].stem,
                               sentence_vectors=not opts["no_sentence_vectors"], chunk_tokens=opts["chunk_tokens"],
                               embedding_model=opts["embedding_model"],
                               progress=lambda it: tqdm(it, total=len(docs), desc="ingest", unit="doc", file=sys.stderr))
        except EvaluationError as exc:
            raise CommandError(str(exc)) from exc
        ingest_s = time.perf_counter() - started
        from agents.providers import get_provider

        provider = get_provider(opts["provider"])
        generates_text = provider.name != "offline"
        sources = facet_sources(ev)
        results = []
        records = opts["records"] or bool(opts["shard"])
        opts["out"].mkdir(parents=True, exist_ok=True)
        # Records are appended as they come, so an interrupted run can still be merged into a report.
        with tqdm(total=len(questions) * len(strategies), desc="evaluate", unit="run", file=sys.stderr) as bar, \
                (opts["out"] / "records.jsonl").open("w", encoding="utf-8") if records else nullcontext() as sink:
            for q in questions:
                for strategy in strategies:
                    results.append(run_one(ev, q, strategy, provider=opts["provider"], generates_text=generates_text, sources=sources))
                    if sink is not None:
                        sink.write(json.dumps(results[-1].as_dict()) + "\n")
                        sink.flush()
                    bar.update(1)
        meta = {
            "command": _command_line(),
            "corpus": str(opts["corpus"]), "questions_file": str(opts["questions"]), "corpus_documents": len(docs),
            "documents_ingested_now": ev.uploaded, "ingest_s": round(ingest_s, 1), "questions": len(questions),
            "answerable": sum(q.answerable for q in questions), "strategies": strategies,
            "provider": f"{provider.name}/{provider.model}", "embedding_model": ev.model_key,
            "context_chunks": K_CONTEXT, "seed": opts["seed"], "limit": opts["limit"], "shard": opts["shard"],
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"), "elapsed_s": round(time.perf_counter() - started, 1),
        }
        self._write(opts, meta, results, records=False)  # already written

    def _merge(self, opts: dict) -> None:
        """One report from shard outputs: results concatenated, cost figures recomputed over all of them."""
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
                "questions": sum(m["questions"] for m in metas), "answerable": sum(m["answerable"] for m in metas),
                "elapsed_s": max(m["elapsed_s"] for m in metas), "shard_commands": [m["command"] for m in metas],
                "finished_at": datetime.now(UTC).isoformat(timespec="seconds")}
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
