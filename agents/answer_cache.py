"""The answer cache: a run's answer reused when the same question is asked again in the same circumstances.

The key (`answer_key`) is a sha256 over everything an answer depends on:

- the question, normalised (`normalise_question`: NFKC, case-folded, whitespace collapsed, trailing
  punctuation dropped);
- the effective scope: the tenant (with its creation time, so a rebuilt database never meets an old
  entry), all departments or the sorted departments, and the corpora the request narrowed to;
- the version of every corpus in that scope (`corpus_versions`): its search settings (embedding model
  and dimension, language, date key, facet keys, sentence vectors) and its visible documents' count,
  highest id, newest change and sum of versions. Every write of a document's chunks (ingest, re-ingest,
  move, delete) stamps the document's `updated_at` or removes it, so any of them changes the version;
- the strategy asked for, the provider (its name, model, endpoint and temperature), the prompts'
  PROMPT_VERSION and the run's budgets (strict citations among them).

Redis holds only `{"run": id, "hash": hash}` under that key, never the tenant's text. A lookup (`lookup`)
reads that run through the caller's scope (agents.access.visible_runs), checks it is what the key says
(same question, scope, strategy, provider, model, prompt version; answered and grounded) and that every
chunk it cites is still visible to this caller, unchanged (kb.access.visible_chunks: its content hash,
within the corpora chosen); anything else is a miss and the question runs. agents.services.ask records a
hit as a run of its own, chained like any other, marked with the run it reused.

Off (no lookup, nothing stored) when the tenant's `answer_cache_ttl_seconds` (default
ANSWER_CACHE_TTL_SECONDS) is 0, the request turns it off, no ANSWER_CACHE_REDIS_URL is configured, a
corpus in scope is being re-embedded, or the question is a conversation's follow-up (a turn with earlier
turns: its runner reads the thread; a conversation's first turn is cached like any question). Only
answered runs are stored. A Redis error is a miss, never the caller's error: Redis then rests
for REDIS_RETRY_SECONDS and a warning is logged at most once a minute.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
import unicodedata
from dataclasses import dataclass
from functools import cache
from typing import Any

import redis
from django.db.models import Count, Max, Q, Sum

from agents import prompts
from agents.access import visible_citations, visible_runs
from agents.citations import CitationCheck
from agents.loop import LoopResult
from agents.models import Citation, Outcome, Run
from agents.steps import RunState, StepRecord
from kb.access import visible_chunks, visible_corpora, visible_documents
from tenants.conf import product_settings
from tenants.models import Tenant
from tenants.scope import Scope, activate
from tenants.tenant_settings import Budgets
from tenants.tenant_settings import read as read_tenant_settings

log = logging.getLogger(__name__)

KEY_SCHEMA = 1  # bump when what goes into the key changes
REDIS_RETRY_SECONDS = 5.0
WARN_INTERVAL_SECONDS = 60.0
SOCKET_TIMEOUT_S = 0.5
_TRAILING = re.compile(r"[\s?!.。？！…;:,]+$")

_resting_until: dict[str, float] = {}
_last_warning = [0.0]
_lock = threading.Lock()


@dataclass(frozen=True)
class AnswerKey:
    """Where a question's answer is cached (`redis_key`) and for how long (`ttl_seconds`)."""

    digest: str
    tenant_id: int
    ttl_seconds: int
    question: str  # normalised

    @property
    def redis_key(self) -> str:
        return f"grounded:answer:{self.tenant_id}:{self.digest}"


@dataclass(frozen=True)
class CachedAnswer:
    """A hit: the run reused and its citations, each still visible to the caller unchanged."""

    run: Run
    citations: list[Citation]


def normalise_question(question: str) -> str:
    """The question as the key sees it: NFKC, case-folded, whitespace collapsed, trailing punctuation dropped."""
    text = " ".join(unicodedata.normalize("NFKC", question).casefold().split())
    return _TRAILING.sub("", text)


def provider_identity(provider: Any) -> dict:
    """What distinguishes one provider's answers from another's: its kind, name, model and settings."""
    kind = type(provider)
    return {"kind": f"{kind.__module__}.{kind.__qualname__}", "name": str(getattr(provider, "name", "")),
            "model": str(getattr(provider, "model", "")), "endpoint": str(getattr(provider, "endpoint", "")),
            "temperature": getattr(provider, "temperature", None)}


def corpus_versions(scope: Scope, corpus_ids: tuple[int, ...] | None) -> list[list] | None:
    """The version of every corpus `scope` sees (narrowed to `corpus_ids`), by id; None while one of them is
    being re-embedded (its searches change as the re-embed goes: not cached). Inside activate(scope)."""
    corpora = visible_corpora(scope)
    if corpus_ids is not None:
        corpora = corpora.filter(pk__in=corpus_ids)
    rows = list(corpora.order_by("pk").values_list("pk", "embedding_model", "embedding_dim", "next_embedding_model", "language",
                                                   "date_key", "facet_keys", "sentence_vectors"))
    if any(row[3] for row in rows):
        return None
    documents = {d["corpus_id"]: d for d in visible_documents(scope).filter(corpus_id__in=[r[0] for r in rows]).order_by()
                 .values("corpus_id").annotate(n=Count("pk"), top=Max("pk"), newest=Max("updated_at"), versions=Sum("version"))}
    versions = []
    for pk, model, dim, _next, language, date_key, facet_keys, sentence_vectors in rows:
        d = documents.get(pk, {})
        versions.append([pk, model, dim, language, date_key, facet_keys, sentence_vectors, d.get("n", 0), d.get("top"),
                         d["newest"].isoformat() if d.get("newest") else None, d.get("versions")])
    return versions


def lookup(*, scope: Scope, question: str, strategy: str, provider: Any, budgets: Budgets,
           corpus_ids: tuple[int, ...] | None) -> tuple[AnswerKey | None, CachedAnswer | None]:
    """The question's key (None: the cache is off for it) and, on a hit, the answer to serve if it may be
    served to `scope` now (module docstring), in one activation of the scope; a tenant with the cache off
    costs one read of its settings."""
    tenant = _tenant(scope)
    if tenant is None:
        return None, None
    with activate(scope):
        key = _key(scope, tenant, question, strategy, provider, budgets, corpus_ids)
        return key, _find(scope, key, strategy, provider, corpus_ids) if key is not None else None


def answer_key(*, scope: Scope, question: str, strategy: str, provider: Any, budgets: Budgets,
               corpus_ids: tuple[int, ...] | None) -> AnswerKey | None:
    """The key of this question's answer, or None when the cache is off for it (module docstring)."""
    tenant = _tenant(scope)
    if tenant is None:
        return None
    with activate(scope):
        return _key(scope, tenant, question, strategy, provider, budgets, corpus_ids)


def _tenant(scope: Scope) -> tuple[int, str] | None:
    """(TTL in seconds, the tenant's creation time) when the cache is on for the scope's tenant, else None."""
    if not product_settings.ANSWER_CACHE_REDIS_URL:
        return None
    row = Tenant.objects.filter(pk=scope.tenant_id).values_list("settings", "created_at").first()  # as tenant_settings.for_tenant
    ttl = read_tenant_settings(row[0]).answer_cache_ttl_seconds if row is not None else 0
    return (ttl, row[1].isoformat()) if row is not None and ttl > 0 else None


def _key(scope: Scope, tenant: tuple[int, str], question: str, strategy: str, provider: Any, budgets: Budgets,
         corpus_ids: tuple[int, ...] | None) -> AnswerKey | None:
    versions = corpus_versions(scope, corpus_ids)
    if versions is None:
        return None
    normalised = normalise_question(question)
    body = {"schema": KEY_SCHEMA, "question": normalised, "tenant": [scope.tenant_id, tenant[1]],
            "departments": "all" if scope.all_departments else sorted(scope.department_ids),
            "corpus_ids": sorted(corpus_ids) if corpus_ids is not None else None, "corpora": versions,
            "strategy": strategy, "provider": provider_identity(provider), "prompt_version": prompts.PROMPT_VERSION,
            "budgets": budgets.as_dict()}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str, ensure_ascii=False).encode()).hexdigest()
    return AnswerKey(digest=digest, tenant_id=scope.tenant_id, ttl_seconds=tenant[0], question=normalised)


def _find(scope: Scope, key: AnswerKey, strategy: str, provider: Any, corpus_ids: tuple[int, ...] | None) -> CachedAnswer | None:
    stored = _on_redis(lambda client: client.get(key.redis_key))
    if not stored:
        return None
    try:
        pointer = json.loads(stored)
        run_id, run_hash = int(pointer["run"]), str(pointer["hash"])
    except (ValueError, TypeError, KeyError):
        return None
    run = (visible_runs(scope).filter(pk=run_id, hash=run_hash, outcome=Outcome.ANSWERED, grounded=True, cached_from_run_id__isnull=True)
           .filter(Q(conversation_id__isnull=True) | Q(turn=1)).first())  # a conversation's first turn had no thread
    if run is None or not _same_question(run, scope, key, strategy, provider_identity(provider)):
        return None
    citations = list(visible_citations(scope).filter(run_id=run.pk).order_by("ordinal"))
    if not citations or not _still_visible(scope, citations, corpus_ids):
        return None
    return CachedAnswer(run=run, citations=citations)


def remember(key: AnswerKey, run: Run) -> None:
    """Keep `run`'s answer under `key` for the key's TTL when it may be reused (answered, grounded); a Redis
    error is logged, never raised."""
    if run.outcome != Outcome.ANSWERED or not run.grounded or run.cached_from_run_id is not None:
        return
    value = json.dumps({"run": run.pk, "hash": run.hash})
    _on_redis(lambda client: client.set(key.redis_key, value, ex=key.ttl_seconds))


def _same_question(run: Run, scope: Scope, key: AnswerKey, strategy: str, identity: dict) -> bool:
    """The stored run answers what the key stands for (a pointer in Redis is not trusted on its own)."""
    stored_scope = run.scope or {}
    same_scope = (bool(stored_scope.get("all_departments")) == scope.all_departments
                  and sorted(stored_scope.get("department_ids") or []) == sorted(scope.department_ids))
    return (same_scope and normalise_question(run.question) == key.question and run.strategy_requested == strategy
            and run.provider == identity["name"][:32] and run.model == identity["model"][:100]
            and run.prompt_version == prompts.PROMPT_VERSION)


def _still_visible(scope: Scope, citations: list[Citation], corpus_ids: tuple[int, ...] | None) -> bool:
    """Every cited chunk is visible to `scope` (within `corpus_ids` when given) with the content it had."""
    chunks = visible_chunks(scope).filter(pk__in={c.chunk_id for c in citations})
    if corpus_ids is not None:
        chunks = chunks.filter(corpus_id__in=corpus_ids)
    now = dict(chunks.values_list("pk", "content_hash"))
    return all(c.chunk_id in now and now[c.chunk_id] == c.content_hash for c in citations)


@cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S)


def _on_redis(work):
    """`work(client)` on the cache's Redis; None when there is none, it is resting after an error, or `work` failed."""
    url = product_settings.ANSWER_CACHE_REDIS_URL
    if not url or time.monotonic() < _resting_until.get(url, 0.0):
        return None
    try:
        return work(_client(url))
    except (redis.RedisError, OSError) as exc:
        now = time.monotonic()
        with _lock:
            _resting_until[url] = now + REDIS_RETRY_SECONDS
            warn = now - _last_warning[0] >= WARN_INTERVAL_SECONDS
            if warn:
                _last_warning[0] = now
        if warn:
            log.warning("answer cache Redis unavailable (%s: %s): answering uncached, retrying Redis every %ss",
                        type(exc).__name__, exc, REDIS_RETRY_SECONDS)
        return None


def serve(state: RunState, hit: CachedAnswer, lookup_ms: float) -> LoopResult:
    """The run's result taken from `hit`: one step saying which run was reused (handed to `on_step`), the
    answer streamed whole to `on_text`, and the reused run's citations, whose chunks `lookup` re-verified."""
    reused = hit.run
    state.strategy = reused.strategy
    state.record(StepRecord(
        ordinal=len(state.steps), kind="tool_call", name="answer_cache", arguments={"run_id": reused.pk, "run_hash": reused.hash},
        chunk_ids=[c.chunk_id for c in hit.citations], content_hashes=[c.content_hash for c in hit.citations],
        output=f"served from the answer cache: the answer of run {reused.pk}, its {len(hit.citations)} cited chunks still "
               "visible to this caller, unchanged", cached=True, latency_ms=round(lookup_ms, 3)))
    if state.on_text is not None:
        state.on_text(reused.answer, False)
    checks = [CitationCheck(ordinal=c.ordinal, chunk_id=c.chunk_id, quoted_text=c.quoted_text, claim=c.claim, verdict=c.verdict,
                            reason=c.reason, document_id=c.document_id, content_hash=c.content_hash) for c in hit.citations]
    return LoopResult(answer=reused.answer, strategy=reused.strategy, outcome=reused.outcome, citations=checks)
