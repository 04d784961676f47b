"""Run an evaluation: ingest a corpus into an evaluation tenant, answer questions, score them.

The corpus goes through the real upload -> parse -> chunk -> embed pipeline (kb.ingest), into its
own tenant, so the product's tenant isolation keeps evaluation data away from everything else.
Re-running is cheap: unchanged documents are no-ops of `upload_document` (content hashes).

Strategies evaluated side by side, all with a final context of at most 10 chunks:
- "classic", "pipeline", "agentic", "auto": `agents.services.ask` with the chosen provider.
- "search:<mode>": one `kb.retrieval.search` call with the whole question, k=10 (baselines).
- "facets:<mode>": the offline provider's facet plan (agents.planning) as one-shot searches,
  using the source values `agents.selectors.metadata_facets` shows the agent.
- "conversation:<agent strategy>": the question asked as the second turn of a thread
  (bench.evaluation.conversation), through agents.conversations like the chat and the API; scored
  on the second turn.
- "history:<agent strategy>": the question asked as the last turn of the conversation its set
  gives it (`history`), replayed as the thread of agents.conversations' turn runner
  (bench.evaluation.history); scored on that turn. A question without history is asked alone.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agents import planning
from agents.budgets import Budgets, budgets_for_tenant
from agents.conversations import Thread, budget_history, send_message, start_conversation, turn_runner
from agents.models import Citation, Run, RunStep
from agents.selectors import metadata_facets
from agents.services import ask
from bench.evaluation.conversation import TwoTurns
from bench.evaluation.dataset import CorpusDoc, Question
from bench.evaluation.history import history_pairs
from bench.evaluation.metrics import (
    K_CONTEXT,
    ContextChunk,
    answer_contains,
    quote_precision_counts,
    quoted_citations,
    retrieval_scores,
)
from bench.evaluation.suite import CorpusProfile
from bench.evaluation.summary import ABSTAIN_OUTCOME, RETRIEVAL_ONLY, QuestionResult, judge_answer
from kb.embedding import ModelChoiceError, checked_model_key, default_model_key
from kb.ingest import resume_stuck_jobs, run_ingest_job, upload_document
from kb.ingest.corpora import save_corpus
from kb.models import Chunk, Corpus, Document, DocumentStatus, IngestJob, JobStatus
from kb.retrieval import SearchFilters, search, search_mode
from kb.retrieval.query import Mode
from tenants.models import Tenant
from tenants.scope import Scope, activate

AGENT_STRATEGIES = ("classic", "pipeline", "agentic", "auto")
SEARCH_MODES = ("keyword", "vector", "hybrid")
CONVERSATION = "conversation"
HISTORY = "history"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class EvaluationError(RuntimeError):
    """The evaluation cannot run (bad strategy name, corpus failed to ingest)."""


@dataclass(frozen=True)
class EvalCorpus:
    """The ingested evaluation corpus: whose scope, and which document holds which doc id."""

    scope: Scope
    corpus_id: int
    doc_keys: dict[int, str]  # Document.pk -> corpus doc_id
    uploaded: int  # documents (re)ingested by this call; 0 when everything was reused
    model_key: str = ""  # the corpus's embedding model, "<model>:<dim>"


def check_strategies(names: Iterable[str]) -> list[str]:
    out = []
    for name in names:
        kind, _, mode = name.partition(":")
        if name in AGENT_STRATEGIES or (kind in ("search", "facets") and mode in SEARCH_MODES) or \
                (kind in (CONVERSATION, HISTORY) and mode in AGENT_STRATEGIES):
            out.append(name)
        else:
            raise EvaluationError(f"unknown strategy {name!r}: use {', '.join(AGENT_STRATEGIES)}, search:<mode> or facets:<mode> "
                                  f"with mode in {', '.join(SEARCH_MODES)}, or conversation:<{'|'.join(AGENT_STRATEGIES)}> "
                                  f"or history:<{'|'.join(AGENT_STRATEGIES)}>")
    return out


def filename_for(doc_id: str) -> str:
    """A stable, safe file name per doc id (the upload's source name, which keys re-ingestion). An id
    the cleaning changes gets a hash of itself, so "A/B" and "A?B" stay two files."""
    safe = _SAFE.sub("_", doc_id)[:440]
    if safe != doc_id:
        safe += "-" + hashlib.sha256(doc_id.encode()).hexdigest()[:12]
    return f"{safe}.txt"


def ensure_corpus(docs: list[CorpusDoc], *, tenant_slug: str, corpus_name: str, sentence_vectors: bool = True,
                  chunk_tokens: int | None = None, embedding_model: str | None = None, profile: CorpusProfile | None = None,
                  progress: Callable[[Iterable], Iterable] = lambda it: it, wait_s: float = 3600.0) -> EvalCorpus:
    """Ingest `docs` into the evaluation tenant's corpus (created on first use, with sentence
    vectors unless told otherwise, embedded with `embedding_model` ("<model>:<dim>", default the
    product's default for new corpora; a reused corpus is checked against it only when it is
    given) and wait for them.

    `profile` (bench.evaluation.suite) is what the corpus declares: its date key and facet keys
    are set on a new corpus and brought up to date on a reused one (before ingesting, so documents
    are dated by it); its language is set on a new corpus and checked on a reused one, whose keyword
    index was built in its own. None leaves a reused corpus as it is and a new one at the defaults.

    Documents no longer in `docs` are deleted so the corpus is exactly the file. Ingest jobs that
    did not run on commit (no broker and an outer transaction, or a busy worker) are run here: jobs
    are idempotent and leased, so running one twice changes nothing. Documents another process is
    ingesting (a Celery worker, a parallel `--shard`) are waited for, up to `wait_s`.
    """
    model, _, dim = (embedding_model or default_model_key()).partition(":")
    try:
        model_key = checked_model_key(model, int(dim) if dim.isdigit() else 0)
    except ModelChoiceError as exc:
        raise EvaluationError(f"--embedding-model {embedding_model or default_model_key()!r}: {exc}") from None
    tenant, _ = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": f"Evaluation ({tenant_slug})"})
    scope = Scope.system(tenant.id, principal="evaluate")
    defaults: dict = {"sentence_vectors": sentence_vectors, "embedding_model": model, "embedding_dim": int(dim)}
    if chunk_tokens:
        defaults["chunk_target_tokens"] = chunk_tokens
    declared = {k: v for k, v in profile.fields().items() if hasattr(Corpus, k)} if profile else {}
    with activate(scope):
        corpus, created = Corpus.objects.for_scope(scope).get_or_create(tenant=tenant, name=corpus_name,
                                                                         defaults={**defaults, **declared})
        if not created and declared:
            _declare(scope, corpus, declared)
    if chunk_tokens and corpus.chunk_target_tokens != chunk_tokens:  # nor the chunk size
        raise EvaluationError(f"corpus {corpus_name!r} was chunked at {corpus.chunk_target_tokens} tokens: use another "
                              "--corpus-name or --tenant, or delete it first")
    if embedding_model and corpus.model_key != model_key:  # reused vectors would not be the model asked for
        raise EvaluationError(f"corpus {corpus_name!r} is embedded with {corpus.model_key}, not {model_key}: use another "
                              "--corpus-name or --tenant, or delete it first")
    if corpus.sentence_vectors != sentence_vectors:  # reused documents would not match the flag
        raise EvaluationError(f"corpus {corpus_name!r} was ingested {'with' if corpus.sentence_vectors else 'without'} "
                              "sentence vectors: use another --corpus-name, or delete it first")
    names = {filename_for(d.doc_id): d for d in docs}
    if len(names) != len(docs):
        raise EvaluationError("two doc ids map to the same file name")
    jobs: list[int] = []
    for doc in progress(docs):
        _, job = upload_document(scope=scope, corpus=corpus, filename=filename_for(doc.doc_id), data=doc.text.encode("utf-8"),
                                 metadata=doc.metadata, title=doc.title[:500])
        if job is not None:
            jobs.append(job.pk)
    with activate(scope):
        stale = Document.objects.for_scope(scope).filter(corpus=corpus).exclude(source_name__in=list(names))
        if stale.exists():
            stale.delete()
        pending = list(IngestJob.objects.for_scope(scope).filter(pk__in=jobs).exclude(status__in=[JobStatus.DONE, JobStatus.FAILED])
                       .values_list("pk", flat=True))
    for job_id in pending:
        run_ingest_job(job_id=job_id, tenant_id=tenant.id)
    deadline = time.monotonic() + wait_s
    while True:  # documents another process (a worker, a parallel shard) is still ingesting
        with activate(scope):
            rows = list(Document.objects.for_scope(scope).filter(corpus=corpus).values_list("pk", "source_name", "status", "error"))
        busy = [name for _, name, status, _ in rows if status in (DocumentStatus.PENDING, DocumentStatus.PROCESSING)]
        if not busy or time.monotonic() > deadline:
            break
        resume_stuck_jobs()  # a job whose process died (heartbeat > 10 min old) would otherwise be waited for in vain
        time.sleep(2)
    failed = [(name, error) for _, name, status, error in rows if status != DocumentStatus.READY]
    if failed:
        raise EvaluationError(f"{len(failed)} document(s) did not ingest, e.g. {failed[0][0]}: {failed[0][1] or 'still pending'}")
    return EvalCorpus(scope=scope, corpus_id=corpus.pk, doc_keys={pk: names[name].doc_id for pk, name, _, _ in rows},
                      uploaded=len(jobs), model_key=corpus.model_key)


def _declare(scope: Scope, corpus: Corpus, declared: dict) -> None:
    """Bring a reused corpus's declarations up to its profile, through kb's corpus service, which
    re-dates its documents (a changed date key) and re-indexes its chunks (a changed language)."""
    changed = [k for k, v in declared.items() if getattr(corpus, k) != v]
    if not changed:
        return
    for key in changed:
        setattr(corpus, key, declared[key])
    save_corpus(scope=scope, corpus=corpus, changed=changed)


# --- One question -----------------------------------------------------------------------------

def _context(ev: EvalCorpus, chunk_ids: list[int]) -> list[ContextChunk]:
    """Chunk texts in the given order (ids of chunks deleted since are skipped)."""
    with activate(ev.scope):
        rows = {pk: (text, doc) for pk, text, doc in
                Chunk.objects.for_scope(ev.scope).filter(pk__in=chunk_ids).values_list("pk", "text", "document_id")}
    return [ContextChunk(rows[c][0], ev.doc_keys.get(rows[c][1], "")) for c in chunk_ids if c in rows]


def final_context_ids(steps: list[dict]) -> list[int]:
    """The chunk ids of a run's final context, from its steps.

    classic/pipeline record them on the last "answer" model call (arguments.context_chunks); the
    agentic loop answers from everything its tool calls returned, which is not recorded as one
    list, so it is derived: tool results interleaved by rank, capped at 10.
    """
    for step in reversed(steps):
        if step["kind"] == "model_call" and step["name"] == "answer":
            return list(step["arguments"].get("context_chunks", []))[:K_CONTEXT]
    lists = [list(s["chunk_ids"]) for s in steps if s["kind"] == "tool_call" and s["chunk_ids"]]
    return planning.interleave(lists, k=K_CONTEXT, key=lambda c: c)


def _score(q: Question, ctx: list[ContextChunk]):
    return retrieval_scores(ctx, q.gold) if q.answerable else None


def _chunk_docs(ev: EvalCorpus, chunk_ids: Iterable[int]) -> dict[int, str]:
    """Chunk id -> the corpus doc id of its document (ids not in this corpus's scope are left out)."""
    ids = set(chunk_ids)
    if not ids:
        return {}
    with activate(ev.scope):
        rows = Chunk.objects.for_scope(ev.scope).filter(pk__in=ids).values_list("pk", "document_id")
        return {pk: ev.doc_keys.get(doc, "") for pk, doc in rows}


def judge_text(ev: EvalCorpus, q: Question, answer: str, outcome: str) -> dict:
    """Answer containment and quotation precision of one answer to an answerable question."""
    if not q.answerable:
        return {}
    contained = None
    if q.answer is not None and outcome not in ("failed", RETRIEVAL_ONLY):
        contained = False if outcome == ABSTAIN_OUTCOME else answer_contains(answer, q.answer, question=q.question)
    gold_docs = {g.doc_key for g in q.gold if g.doc_key}
    if not gold_docs:  # gold facts without their documents: precision cannot be judged
        return {"contained": contained}
    cited = [i for _, ids in quoted_citations(answer) for i in ids]
    quotes, on_gold = quote_precision_counts(answer, _chunk_docs(ev, cited), gold_docs)
    return {"contained": contained, "quotes": quotes, "quotes_on_gold": on_gold}


def run_agent(ev: EvalCorpus, q: Question, strategy: str, provider: str | None, generates_text: bool) -> QuestionResult:
    run = ask(scope=ev.scope, question=q.question, strategy=strategy, provider=provider)
    return score_run(ev, q, run, strategy=strategy, generates_text=generates_text)


def run_conversation(ev: EvalCorpus, q: Question, strategy: str, provider: str | None, generates_text: bool,
                     turns: TwoTurns) -> QuestionResult:
    """`q` as the second turn of a new thread (`strategy` is "conversation:<agent strategy>"); scored on that turn."""
    agent_strategy = strategy.partition(":")[2]
    conversation = start_conversation(scope=ev.scope, title=f"evaluation {q.qid}")
    send_message(scope=ev.scope, conversation_id=conversation.pk, message=turns.first, strategy=agent_strategy, provider=provider)
    run = send_message(scope=ev.scope, conversation_id=conversation.pk, message=turns.followup, strategy=agent_strategy,
                       provider=provider)
    result = score_run(ev, q, run, strategy=strategy, generates_text=generates_text)
    # Figures only (reports never hold question text): was the follow-up resolved back to the name it replaced?
    result.extra["resolved_back"] = turns.name.casefold() in run.question.casefold()
    return result


def history_thread(q: Question, budgets: Budgets) -> Thread:
    """The thread `q`'s given history makes (bench.evaluation.history), cut to `budgets`' history
    budget like a stored conversation's; no evidence, since no turn of it was answered here."""
    return Thread(conversation_id=0, history=budget_history(history_pairs(q.history), budgets), evidence=())


def run_history(ev: EvalCorpus, q: Question, strategy: str, provider: str | None, generates_text: bool) -> QuestionResult:
    """`q` as the last turn of its given conversation (`strategy` is "history:<agent strategy>"); scored on that turn."""
    budgets = budgets_for_tenant(ev.scope.tenant_id)
    thread = history_thread(q, budgets)
    run = ask(scope=ev.scope, question=q.question, strategy=strategy.partition(":")[2], provider=provider, budgets=budgets,
              runner=turn_runner(thread))
    result = score_run(ev, q, run, strategy=strategy, generates_text=generates_text)
    result.extra["history_turns"] = len(thread.history)  # figures only: how many earlier turns the follow-up saw
    return result


def relevance_ms(steps: list[dict]) -> float:
    """What the relevance model cost a run: its rerank steps, and its scoring inside provider calls
    (a step's `arguments.relevance`, agents.steps.relevance_cost_since)."""
    total = 0.0
    for step in steps:
        spent = (step.get("arguments") or {}).get("relevance_ms")
        inside = ((step.get("arguments") or {}).get("relevance") or {}).get("relevance_ms")
        total += float(spent or 0.0) + float(inside or 0.0)
    return total


def score_run(ev: EvalCorpus, q: Question, run: Run, *, strategy: str, generates_text: bool) -> QuestionResult:
    """One stored Run scored against the question's gold: its final context, outcome, citations and cost."""
    with activate(ev.scope):
        steps = list(RunStep.objects.for_scope(ev.scope).filter(run_id=run.pk).order_by("ordinal")
                     .values("kind", "name", "arguments", "chunk_ids"))
        verdicts = list(Citation.objects.for_scope(ev.scope).filter(run_id=run.pk).values_list("verdict", flat=True))
    ctx = _context(ev, final_context_ids(steps))
    lenient, strict = judge_answer(answer=run.answer, outcome=run.outcome, gold=q.answer, generates_text=generates_text)
    return QuestionResult(
        qid=q.qid, question_type=q.question_type, strategy=strategy, answerable=q.answerable, outcome=run.outcome,
        scores=_score(q, ctx), context_size=len(ctx), lenient=lenient, strict=strict, citations=len(verdicts),
        citations_verified=sum(v == "verified" for v in verdicts), model_calls=sum(s["kind"] == "model_call" for s in steps),
        tool_calls=run.tool_calls, input_tokens=run.input_tokens, output_tokens=run.output_tokens, latency_ms=run.latency_ms,
        relevance_ms=relevance_ms(steps), error=run.error[:500], extra={"strategy_used": run.strategy},
        **judge_text(ev, q, run.answer, run.outcome))


def facet_sources(ev: EvalCorpus) -> planning.Facets:
    """The facets the agent's `facets` tool shows for this scope (every value, not the tool's first 50)."""
    with activate(ev.scope):
        return planning.Facets.from_tool(metadata_facets(ev.scope, max_values=10_000))


def facet_search(scope: Scope, question: str, facets: planning.Facets, mode: Mode, *, k: int = K_CONTEXT) -> tuple[list[int], int]:
    """The planner's narrowed searches alone, without the agent loop: (chunk ids best first, searches made)."""
    lists: list[list[int]] = []
    calls = 0
    found = planning.find_mentions(question, facets)
    subs = planning.GeneralPlanner.mention_queries(question, found, facets) if found else [planning.SubQuery(question)]
    for sub in subs:
        meta: dict[str, str | int | float | bool | list | tuple] | None = {key: list(values) for key, values in sub.narrow} or None
        dated = SearchFilters(metadata=meta, date_after=sub.date_after, date_before=sub.date_before)
        hits = search(scope, sub.text, k=k, mode=mode, filters=dated).hits
        calls += 1
        if not hits and (sub.date_after or sub.date_before):  # a date off by a time zone: drop it
            hits = search(scope, sub.text, k=k, mode=mode, filters=SearchFilters(metadata=meta)).hits
            calls += 1
        lists.append([h.chunk_id for h in hits])
    return planning.interleave(lists, k=k, key=lambda c: c), calls


def run_retrieval(ev: EvalCorpus, q: Question, strategy: str, sources: planning.Facets) -> QuestionResult:
    kind, _, mode_name = strategy.partition(":")
    mode = search_mode(mode_name)
    started = time.perf_counter()
    if kind == "search":
        ids, calls = [h.chunk_id for h in search(ev.scope, q.question, k=K_CONTEXT, mode=mode).hits], 1
    else:
        ids, calls = facet_search(ev.scope, q.question, sources, mode)
    latency = (time.perf_counter() - started) * 1000
    ctx = _context(ev, ids)
    return QuestionResult(qid=q.qid, question_type=q.question_type, strategy=strategy, answerable=q.answerable,
                          outcome=RETRIEVAL_ONLY, scores=_score(q, ctx), context_size=len(ctx), tool_calls=calls, latency_ms=latency)


def run_one(ev: EvalCorpus, q: Question, strategy: str, *, provider: str | None, generates_text: bool,
            sources: planning.Facets, turns: TwoTurns | None = None) -> QuestionResult:
    """One question through one strategy; an exception becomes a failed result, not a crashed run."""
    try:
        if strategy in AGENT_STRATEGIES:
            return run_agent(ev, q, strategy, provider, generates_text)
        if strategy.startswith(CONVERSATION + ":"):
            if turns is None:
                raise EvaluationError(f"{strategy}: question {q.qid} names nothing of its gold documents to refer back to")
            return run_conversation(ev, q, strategy, provider, generates_text, turns)
        if strategy.startswith(HISTORY + ":"):
            return run_history(ev, q, strategy, provider, generates_text)
        return run_retrieval(ev, q, strategy, sources)
    except Exception as exc:  # noqa: BLE001 - one bad question must not lose the other 1,920
        return QuestionResult(qid=q.qid, question_type=q.question_type, strategy=strategy, answerable=q.answerable, outcome="failed",
                              scores=_score(q, []), context_size=0, error=f"{type(exc).__name__}: {exc}"[:500])
