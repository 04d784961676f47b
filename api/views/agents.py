"""Ask (sync JSON and Server-Sent Events), run traces and chain verification."""

from __future__ import annotations

import dataclasses
import functools
import json
import queue
import threading
from collections.abc import Callable, Iterator

from django.db import connections
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from agents.access import access_run, visible_runs
from agents.budgets import spend_daily_run
from agents.chain import verify_tenant_chain
from agents.citations import for_citations
from agents.models import Citation, Outcome, Run, RunStep, Verdict
from agents.rendering import answer_html
from agents.review import principal_names, search_runs
from agents.selectors import run_citations, run_steps
from agents.services import InvalidQuestion, RunNotRecorded, ask, check_corpora
from api import serializers as s
from api.permissions import ASK, AUDIT
from api.views.base import ScopedAPIView, date_bound
from kb.models import Chunk
from tenants.replicas import current_read_alias
from tenants.scope import Scope, activate

# --- Run filters ----------------------------------------------------------------------------------


def _text(params, field: str, max_length: int = 200) -> str:
    """A text filter: NUL (which PostgreSQL text cannot hold) and overlong values are a 400 on the field."""
    value = params.get(field) or ""
    if "\x00" in value:
        raise ValidationError({field: ["must not contain NUL characters"]})
    if len(value) > max_length:
        raise ValidationError({field: [f"at most {max_length} characters"]})
    return value


def filter_runs(qs: QuerySet, params) -> QuerySet:
    """Filters of the API's runs list: since/until, principal, outcome, strategy, unverified, q (text)."""
    if since := date_bound(params.get("since"), "since", end=False):
        qs = qs.filter(created_at__gte=since)
    if until := date_bound(params.get("until"), "until", end=True):
        qs = qs.filter(created_at__lte=until)
    if principal := _text(params, "principal"):
        qs = qs.filter(principal=principal)
    if outcome := params.get("outcome"):
        if outcome not in Outcome.values:
            raise ValidationError({"outcome": [f"one of {', '.join(Outcome.values)}"]})
        qs = qs.filter(outcome=outcome)
    if strategy := _text(params, "strategy"):
        qs = qs.filter(strategy=strategy)
    if q := _text(params, "q", max_length=500).strip():
        qs = search_runs(qs, q)
    unverified = params.get("unverified")
    if unverified not in (None, ""):
        if unverified.lower() not in {"true", "false", "1", "0"}:
            raise ValidationError({"unverified": ["true or false"]})
        # A correlated EXISTS on the run and its tenant (an exclude() across the relation would
        # correlate on the run id alone); the outer query is already the caller's scoped runs.
        has = Exists(Citation.objects.unscoped_dangerously().filter(
            run_id=OuterRef("pk"), tenant_id=OuterRef("tenant_id"),
            verdict__in=[v for v in Verdict.values if v != Verdict.VERIFIED]))
        qs = qs.filter(has) if unverified.lower() in {"true", "1"} else qs.exclude(has)
    return qs


def _with_unverified_count(qs: QuerySet) -> QuerySet:
    return qs.annotate(unverified_citations=Count("citations", filter=~Q(citations__verdict=Verdict.VERIFIED)))


# --- Shapes ----------------------------------------------------------------------------------------


def run_detail(scope: Scope, run: Run) -> dict:
    """The run with its steps, citations and the cited chunks still visible to `scope`. Inside activate(scope)."""
    steps, citations = run_steps(scope, run.id), run_citations(scope, run.id)
    chunks = {c.id: c for c in Chunk.objects.for_scope(scope).filter(id__in=[c.chunk_id for c in citations]).select_related("document")}
    run.unverified_citations = sum(1 for c in citations if c.verdict != Verdict.VERIFIED)
    names = principal_names(scope.tenant_id, [run.principal], using=current_read_alias())
    kept = for_citations(scope, [(c.chunk_id, c.content_hash) for c in citations])
    return s.RunDetailSerializer(run, context={"steps": steps, "citations": citations, "chunks": chunks, "principal_names": names,
                                               "evidence": kept}).data


# --- Ask -------------------------------------------------------------------------------------------


def _ask(**kwargs) -> Run:
    """agents.services.ask (which spends the tenant's daily run budget: api.errors answers 429 past it);
    an invalid question is a 400 on its field."""
    try:
        return ask(**kwargs)
    except InvalidQuestion as exc:
        field = exc.field or ("strategy" if "strategy" in str(exc) else "question")
        raise ValidationError({field: [str(exc)]}) from None


def chosen_corpora(scope: Scope, corpus_ids) -> tuple[int, ...] | None:
    """agents.services.check_corpora, a 400 on `corpus_ids` for an id the caller cannot see: checked
    before a stream spends its run of the budget and answers 200."""
    try:
        return check_corpora(scope, corpus_ids)
    except InvalidQuestion as exc:
        raise ValidationError({"corpus_ids": [str(exc)]}) from None


def _counted_ask(**kwargs) -> Run:
    """`_ask` of a streamed question: the view spent its run of the daily budget before the stream's 200."""
    return _ask(spend_budget=False, **kwargs)


def step_json(step) -> dict:
    """Whatever the loop hands `on_step` (a RunStep, a dataclass or a dict) as JSON-able data."""
    if isinstance(step, RunStep):
        return dict(s.RunStepSerializer(step).data)
    if dataclasses.is_dataclass(step) and not isinstance(step, type):
        return json.loads(json.dumps(dataclasses.asdict(step), default=str))
    if isinstance(step, dict):
        return json.loads(json.dumps(step, default=str))
    return {"step": str(step)}


class Ask(ScopedAPIView):
    """Answer a question from the caller's corpora; returns the run with steps and verified citations."""

    roles = ASK
    pins_writes = False  # the stored run pins its asker (agents.services.record_run)

    @extend_schema(request=s.AskRequestSerializer, responses=s.RunDetailSerializer)
    def post(self, request: Request) -> Response:
        ser = s.AskRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        run = _ask(scope=self.scope, question=ser.validated_data["question"], strategy=ser.validated_data["strategy"],
                   corpus_ids=ser.validated_data.get("corpus_ids"), use_cache=ser.validated_data["cache"])
        with activate(self.scope):
            return Response(run_detail(self.scope, run))  # the stored run, as ask() returns it


def sse(event: str, data) -> bytes:
    """One Server-Sent Event: `event: <name>` and its data as one line of JSON."""
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


_DONE = object()
KEEPALIVE_SECONDS = 15.0


def start_background(target) -> None:
    """Run `target` off the request thread (tests may replace this to run inline)."""
    threading.Thread(target=target, daemon=True, name="ask-stream").start()


def ask_events(scope: Scope, question: str, strategy: str, *, asker: Callable[..., Run] | None = None) -> Iterator[bytes]:
    """The one encoding of a streamed question, as Server-Sent Events: `step` per agent step as it
    happens, `text` ({delta, reset}) per piece of the answer as it is written (agents.streaming: a
    draft, at least a sentence or line per event; `reset` drops what was shown of an earlier attempt;
    none under strict citations), then `answer` (answer, answer_html: agents.rendering, outcome,
    grounded, missing, citations) and `done` (run_id, latency_ms; conversation_id, turn and the
    standalone question for a conversation's turn), sent only once the run is stored, or `error`
    (code, message) instead of those two (`run_not_recorded` when storing the run failed: the steps
    seen belong to no record); a `: keepalive` comment after every KEEPALIVE_SECONDS of silence.
    When the reader goes away (the server closes this generator once a write to it fails: at the
    next event or keepalive after the reader left) the run stops after its step in progress and is
    stored as failed, "RunStopped" in its error (agents.steps.RunStopped): Stop in the chat.
    `asker` answers instead of `ask` (called with scope, question, strategy, on_step, on_text and
    should_stop): a conversation's turn."""
    events: queue.Queue = queue.Queue()
    gone = threading.Event()  # the reader closed the stream: the run stops after its step in progress

    def work() -> None:
        try:
            run = (asker or _ask)(scope=scope, question=question, strategy=strategy,
                                  on_step=lambda step: events.put(("step", step_json(step))),
                                  on_text=lambda delta, reset: events.put(("text", {"delta": delta, "reset": reset})),
                                  should_stop=gone.is_set)
            with activate(scope):
                detail = run_detail(scope, run)
            events.put(("answer", {**{k: detail[k] for k in ("answer", "outcome", "grounded", "missing", "citations")},
                                   "answer_html": answer_html(detail["answer"])}))
            done = {"run_id": run.id, "latency_ms": detail["latency_ms"]}
            if run.conversation_id is not None:
                done.update(conversation_id=run.conversation_id, turn=run.turn, question=run.question)
            events.put(("done", done))
        except RunNotRecorded as exc:  # the steps streamed so far belong to no stored run: say so
            events.put(("error", {"code": "run_not_recorded", "message": str(exc)[:500]}))
        except Exception as exc:  # reported to the client as an event; the run (if any) is in the trace
            events.put(("error", {"code": exc.__class__.__name__, "message": str(exc)[:500]}))
        finally:
            events.put(_DONE)
            if threading.current_thread() is not threading.main_thread():
                connections.close_all()

    start_background(work)
    try:
        while True:
            try:
                item = events.get(timeout=KEEPALIVE_SECONDS)
            except queue.Empty:
                yield b": keepalive\n\n"
                continue
            if item is _DONE:
                return
            yield sse(*item)
    finally:  # the server closes this generator when a write to a reader that went away fails
        gone.set()


class AskStream(ScopedAPIView):
    """Like ask, as Server-Sent Events: `step` per agent step as it happens, then `answer`, then `done`
    (or `error`)."""

    roles = ASK
    pins_writes = False  # the stored run pins its asker (agents.services.record_run)

    @extend_schema(request=s.AskRequestSerializer,
                   responses={(200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description="SSE stream")})
    def post(self, request: Request) -> StreamingHttpResponse:
        ser = s.AskRequestSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        chosen = chosen_corpora(self.scope, ser.validated_data.get("corpus_ids"))
        spend_daily_run(self.scope.tenant_id)  # past the budget: 429 (api.errors) now, not an error event after the 200
        events = ask_events(self.scope, ser.validated_data["question"], ser.validated_data["strategy"],
                            asker=functools.partial(_counted_ask, corpus_ids=chosen, use_cache=ser.validated_data["cache"]))
        response = StreamingHttpResponse(events, content_type="text/event-stream", status=status.HTTP_200_OK)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response


# --- Runs ------------------------------------------------------------------------------------------

RUN_FILTERS = [
    OpenApiParameter("since", str, description="ISO date or datetime (inclusive)"),
    OpenApiParameter("until", str, description="ISO date or datetime (inclusive)"),
    OpenApiParameter("principal", str, description="'user:<id>' or 'key:<public id>'"),
    OpenApiParameter("outcome", str, enum=Outcome.values),
    OpenApiParameter("strategy", str),
    OpenApiParameter("unverified", bool, description="only runs with (true) / without (false) unverified citations"),
    OpenApiParameter("q", str, description="text in the question or answer: full-text (English stemming, web-search "
                     "syntax) or a plain substring"),
]


class RunList(ScopedAPIView):
    """Agent runs, newest first (auditors and admins)."""

    roles = AUDIT

    @extend_schema(parameters=RUN_FILTERS, responses=s.RunSerializer(many=True))
    def get(self, request: Request) -> Response:
        with self.reading() as alias:  # the read replica where tenants.replicas allows it
            qs = _with_unverified_count(filter_runs(visible_runs(self.scope), request.query_params))
            paginator = self.pagination_class()
            page: list[Run] = paginator.paginate_queryset(qs, request, view=self) or []
            names = principal_names(self.scope.tenant_id, [run.principal for run in page], using=alias)
            return paginator.get_paginated_response(s.RunSerializer(page, many=True, context={"principal_names": names}).data)


class RunDetail(ScopedAPIView):
    """One run with its step timeline and citations (each with its verdict and the chunk it cites)."""

    roles = AUDIT

    @extend_schema(responses=s.RunDetailSerializer)
    def get(self, request: Request, run_id: int) -> Response:
        # On the read replica when it has the run; a run it has not replayed yet is read on the primary.
        return self.read_one(lambda scope: run_detail(scope, access_run(scope, run_id)), replica=True)


class ChainVerify(ScopedAPIView):
    """Recompute the tenant's run hash chain; names the first broken run, if any."""

    roles = AUDIT

    @extend_schema(responses=s.ChainStatusSerializer)
    def get(self, request: Request) -> Response:
        with activate(self.scope):
            report = verify_tenant_chain(self.scope.tenant_id, using="default")
        brk = report.first_break
        return Response({"ok": report.ok, "runs_checked": report.runs_checked,
                         "first_break": {"run_id": brk.run_id, "seq": brk.seq, "reason": brk.reason} if brk else None})
