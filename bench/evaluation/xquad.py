"""XQuAD: questions in other languages over English paragraphs (`manage.py evaluate --xquad-dir DIR`).

XQuAD (github.com/google-deepmind/xquad, CC BY-SA 4.0) holds the same 1,190 SQuAD v1.1 questions
over 240 paragraphs of 48 English Wikipedia articles, professionally translated into 10 languages;
`xquad.<lang>.json` is SQuAD-formatted and question ids are shared across languages. The corpus here
is the *English* paragraphs, one document each (doc id `xquad-<article>-<paragraph>`, title the
article's), ingested through the product's pipeline into the evaluation tenant, one corpus per
embedding model. Every question, in each language, is one scoped `kb.retrieval.search` (k=10, the
`search:<mode>` baseline of the evaluation) and scores evidence recall@k: 1 when a chunk of the
paragraph its English original was asked about is among the top k hits. Questions are split into
halves by id order (first 595 ids, last 595) so a rule can be chosen on the first and reported on
the second. The data is read from the folder given and never copied into the repository.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError

from bench.evaluation.dataset import CorpusDoc
from bench.evaluation.environment import run_environment
from bench.evaluation.runner import EvalCorpus, EvaluationError, ensure_corpus
from kb.embedding import embed_windowed, get_embedder
from kb.retrieval import search
from kb.retrieval.query import Mode

LANGUAGES = ("en", "de", "es", "ru")
MODES: tuple[Mode, ...] = ("vector", "hybrid")
KS = (5, 10)
HALVES = ("first", "second", "all")


class XquadError(ValueError):
    """The folder does not hold usable XQuAD files."""


@dataclass(frozen=True)
class XquadQuestion:
    qid: str
    language: str
    text: str
    gold: str  # the doc id of the English paragraph


def file_for(folder: Path, language: str) -> Path:
    return folder / f"xquad.{language}.json"


def missing_files(folder: Path, languages: Sequence[str]) -> list[Path]:
    """The files of `languages` (and English, the corpus) absent from `folder`."""
    return [p for lang in dict.fromkeys(("en", *languages)) if not (p := file_for(folder, lang)).is_file()]


def _articles(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        if not isinstance(data, list):
            raise TypeError("'data' is not a list")
        return data
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise XquadError(f"{path}: not an XQuAD (SQuAD-format) file: {exc}") from exc


def load_xquad(folder: Path, languages: Sequence[str] = LANGUAGES) -> tuple[list[CorpusDoc], dict[str, list[XquadQuestion]]]:
    """(the English paragraphs as documents, {language: its questions, in id order}). Every
    question's id must be one of the English file's (that is how its gold paragraph is known)."""
    docs: list[CorpusDoc] = []
    gold: dict[str, str] = {}
    for a, article in enumerate(_articles(file_for(folder, "en"))):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            doc_id = f"xquad-{a:02d}-{p:02d}"
            docs.append(CorpusDoc(doc_id=doc_id, title=str(article.get("title", doc_id)), text=paragraph["context"],
                                  metadata={"article": str(article.get("title", ""))}))
            for qa in paragraph.get("qas", []):
                gold[qa["id"]] = doc_id
    questions: dict[str, list[XquadQuestion]] = {}
    for lang in languages:
        found = [XquadQuestion(qid=qa["id"], language=lang, text=qa["question"], gold=gold.get(qa["id"], ""))
                 for article in _articles(file_for(folder, lang))
                 for paragraph in article.get("paragraphs", []) for qa in paragraph.get("qas", [])]
        unknown = [q.qid for q in found if not q.gold]
        if unknown:
            raise XquadError(f"xquad.{lang}.json: {len(unknown)} question id(s) not in xquad.en.json, e.g. {unknown[0]}")
        questions[lang] = sorted(found, key=lambda q: q.qid)
    return docs, questions


def half_of(qids: Iterable[str]) -> dict[str, str]:
    """qid -> "first" or "second": the first half of the ids in sorted order, then the rest."""
    ordered = sorted(set(qids))
    cut = len(ordered) // 2
    return {qid: "first" if i < cut else "second" for i, qid in enumerate(ordered)}


def gold_ranks(ev: EvalCorpus, questions: list[XquadQuestion], vectors: Any, mode: Mode, *, k: int = max(KS)) -> list[int | None]:
    """Per question, the 1-based rank of the first hit from its gold paragraph among the top `k`
    hits of one scoped search (None: not among them). `vectors`: the questions embedded with the
    corpus's model as a search embeds a query (`embed_questions`), passed in so that every mode
    reuses them."""
    ranks: list[int | None] = []
    for q, vec in zip(questions, vectors, strict=True):
        hits = search(ev.scope, q.text, k=k, mode=mode, query_vectors={ev.model_key: [float(x) for x in vec]}).hits
        docs = [ev.doc_keys.get(h.document_id) for h in hits]
        ranks.append(docs.index(q.gold) + 1 if q.gold in docs else None)
    return ranks


def embed_questions(model_key: str, questions: list[XquadQuestion]) -> Any:
    """The questions embedded in one batch, task "query", as kb.retrieval.prepare embeds a query."""
    return embed_windowed(get_embedder(model_key), [q.text for q in questions], "query")


def evaluate_xquad(folder: Path, *, tenant: str, models: Sequence[str], languages: Sequence[str] = LANGUAGES,
                   modes: Sequence[Mode] = MODES, limit: int | None = None, log: Callable[[str], None] = lambda _: None,
                   sink: Callable[[list[dict]], None] = lambda _: None) -> dict:
    """Recall@5 and @10 per model x mode x language x half, with what was run. `limit` keeps the
    first `limit` questions of each half (a quick look; the report says so). `sink` gets each
    model x mode x language's rows as soon as they are measured (a long run keeps what it did)."""
    docs, questions = load_xquad(folder, languages)
    halves = half_of(q.qid for q in questions["en" if "en" in questions else languages[0]])
    if limit:
        kept = {qid for h in ("first", "second") for qid in sorted(q for q, v in halves.items() if v == h)[:limit]}
        questions = {lang: [q for q in qs if q.qid in kept] for lang, qs in questions.items()}
    rows: list[dict] = []
    corpora: dict[str, dict] = {}
    for model in models:
        started = time.perf_counter()
        ev = ensure_corpus(docs, tenant_slug=tenant, corpus_name=f"xquad-en-{model.partition(':')[0]}",
                           sentence_vectors=False, embedding_model=model)
        corpora[model] = {"ingest_s": round(time.perf_counter() - started, 1), "documents_ingested_now": ev.uploaded}
        log(f"{model}: {len(docs)} English paragraphs ready ({corpora[model]['ingest_s']} s)")
        vectors = {}
        for lang in languages:
            started = time.perf_counter()
            vectors[lang] = embed_questions(ev.model_key, questions[lang])
            log(f"{model}: {len(questions[lang])} {lang} questions embedded in {time.perf_counter() - started:.0f} s")
        for mode in modes:
            for lang in languages:
                started = time.perf_counter()
                ranks = gold_ranks(ev, questions[lang], vectors[lang], mode)
                elapsed = time.perf_counter() - started
                measured = []
                for half in HALVES:
                    picked = [r for q, r in zip(questions[lang], ranks, strict=True) if half == "all" or halves[q.qid] == half]
                    measured.append({"model": model, "mode": mode, "language": lang, "half": half, "questions": len(picked),
                                     **{f"recall@{k}": round(100.0 * sum(r is not None and r <= k for r in picked) / max(1, len(picked)), 1)
                                        for k in KS}})
                rows.extend(measured)
                sink(measured)
                log(f"{model} {mode} {lang}: {len(ranks)} questions in {elapsed:.0f} s, "
                    f"recall@10 {rows[-1]['recall@10']}")
    return {"meta": {"documents": len(docs), "questions_per_language": {lang: len(qs) for lang, qs in questions.items()},
                     "models": list(models), "modes": list(modes), "languages": list(languages), "limit": limit,
                     "corpora": corpora, "halves": "question ids sorted; first = the first half, second = the rest"},
            "rows": rows}


def markdown_table(report: dict) -> str:
    """One line per model x mode x half: recall@5 / recall@10 per language, and each language's gap to English."""
    langs = report["meta"]["languages"]
    head = ["model", "mode", "half", "questions"] + [f"{lang} R@5 / R@10" for lang in langs] + \
        [f"{lang}−en R@10" for lang in langs if lang != "en"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    index = {(r["model"], r["mode"], r["half"], r["language"]): r for r in report["rows"]}
    for model in report["meta"]["models"]:
        for mode in report["meta"]["modes"]:
            for half in HALVES:
                cells = [c for lang in langs if (c := index.get((model, mode, half, lang))) is not None]
                if len(cells) != len(langs):
                    continue
                by_lang = dict(zip(langs, cells, strict=True))
                gaps = [f"{by_lang[lang]['recall@10'] - by_lang['en']['recall@10']:+.1f}" if "en" in by_lang else "—"
                        for lang in langs if lang != "en"]
                lines.append("| " + " | ".join([f"`{model}`", mode, half, str(cells[0]["questions"])]
                                              + [f"{c['recall@5']:.1f} / {c['recall@10']:.1f}" for c in cells] + gaps) + " |")
    return "\n".join(lines) + "\n"


DEFAULT_MODELS = ("minilm-l6-v2:384", "multilingual-e5-small-q4:384")


def run_xquad_command(command: BaseCommand, opts: dict) -> None:
    """`manage.py evaluate --xquad-dir DIR`: skips with a message when DIR lacks the files; writes
    report.json and report.md (the table) to --out/xquad and prints the table; rows.jsonl there
    grows as the run goes."""
    folder: Path = opts["xquad_dir"]
    languages = [lang.strip() for lang in opts["xquad_languages"].split(",") if lang.strip()]
    if missing := missing_files(folder, languages):
        command.stderr.write(f"xquad: skipped, {folder} lacks " + ", ".join(p.name for p in missing)
                             + " (fetch github.com/google-deepmind/xquad and pass its folder)")
        return
    models = [m.strip() for m in (opts["embedding_model"] or ",".join(DEFAULT_MODELS)).split(",") if m.strip()]
    modes = [m.strip() for m in opts["xquad_modes"].split(",") if m.strip()]
    if unknown := [m for m in modes if m not in ("keyword", "vector", "hybrid")]:
        raise CommandError(f"--xquad-modes: unknown search mode {unknown[0]!r} (keyword, vector or hybrid)")
    out: Path = opts["out"] / "xquad"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (out / "rows.jsonl").open("w", encoding="utf-8") as rows_file:
        def sink(rows: list[dict]) -> None:
            rows_file.writelines(json.dumps(r) + "\n" for r in rows)
            rows_file.flush()

        try:
            report = evaluate_xquad(folder, tenant=opts["tenant"], models=models, languages=languages,
                                    modes=cast(list[Mode], modes), limit=opts["limit"], log=command.stderr.write, sink=sink)
        except (XquadError, EvaluationError) as exc:
            raise CommandError(str(exc)) from exc
    report["meta"].update({"command": "manage.py " + " ".join(sys.argv[1:]), "xquad_dir": str(folder),
                           "elapsed_s": round(time.perf_counter() - started, 1),
                           "finished_at": datetime.now(UTC).isoformat(timespec="seconds"), "environment": run_environment()})
    table = markdown_table(report)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out / "report.md").write_text(f"# XQuAD evidence recall\n\n`{report['meta']['command']}`\n\n{table}", encoding="utf-8")
    command.stdout.write(table)
    command.stderr.write(f"wrote {out / 'report.json'} and {out / 'report.md'}")
