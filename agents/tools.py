"""The agent's read-only tools: typed, documented functions that receive the run's deps.

The tenant scope reaches a tool only through `ToolDeps.scope` (built from the authenticated
caller); no argument a model fills in can widen it. Department and corpus arguments can only
narrow: an id outside the scope returns nothing, exactly like an id that does not exist.
Bad arguments and unknown tools come back as a readable error the model can correct.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.budgets import Budgets
from agents.citations import RetrievedChunk, grounding_report
from agents.messages import ToolCall, ToolSpec
from agents.planning import Facets, without_facets
from agents.prompts import DATA_NOTICE, chunk_block
from agents.selectors import chunks_around, corpus_overview, document_section, metadata_facets
from agents.summaries import document_titled, group_pages, summarise
from kb import retrieval
from tenants.scope import Scope, activate

log = logging.getLogger(__name__)


class ToolArgumentError(ValueError):
    """The model passed arguments the tool cannot use; the message tells it what to fix."""


@dataclass
class ToolDeps:
    scope: Scope
    budgets: Budgets
    retrieved: dict[int, RetrievedChunk] = field(default_factory=dict)  # every chunk shown to the model in this run
    search_cache: dict[str, ToolOutcome] = field(default_factory=dict)
    facet_values: tuple[str, ...] = ()  # the enumeration values the facets tool showed in this run
    # The corpora the asker chose for this question (checked visible by agents.services.check_corpora);
    # None: every corpus the scope sees. Every tool reads within them, whatever ids a model passes.
    corpus_ids: tuple[int, ...] | None = None

    def within(self, corpus_ids: list[int] | None) -> list[int] | None:
        """The corpora a call may read: those it asks for, within the chosen ones ([]: none of them is)."""
        if self.corpus_ids is None:
            return corpus_ids or None
        return list(self.corpus_ids) if not corpus_ids else [c for c in corpus_ids if c in self.corpus_ids]


def document_share(deps: ToolDeps, names: Sequence[str]) -> dict[str, float]:
    """For each name, the share of the documents the run may read (the caller's scope, within the
    chosen corpora) that name it (kb.retrieval.documents_naming). Not a tool a model calls: a count a
    provider reading the evidence may ask for (agents.messages.ModelRequest.document_share)."""
    return retrieval.documents_naming(deps.scope, names, deps.corpus_ids)


@dataclass(frozen=True)
class ToolOutcome:
    content: dict[str, Any]  # what the model sees
    chunk_ids: tuple[int, ...] = ()
    content_hashes: tuple[str, ...] = ()
    effective_filter: dict = field(default_factory=dict)
    error: str = ""
    cached: bool = False
    # Hits past the output budget: not shown to the model, so not citable by it. A strategy that
    # builds its context in code (the pipeline) may still use them: its answer call shows them.
    overflow: tuple[RetrievedChunk, ...] = ()
    # Every hit's id in the search's own order, shown or past the budget (a long chunk that does not
    # fit is passed over for shorter ones after it, so shown + overflow is not that order).
    ranked_ids: tuple[int, ...] = ()

    @classmethod
    def failed(cls, message: str) -> ToolOutcome:
        return cls(content={"error": message}, error=message)


# --- Argument validation ------------------------------------------------------------------------

_INT_ID = re.compile(r"^\s*(?:c:)?\s*(\d+)\s*$", re.IGNORECASE)
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ][0-9:.+\-Z]*)?$")


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ToolArgumentError(f"'{name}' must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and (m := _INT_ID.match(value)):
        return int(m.group(1))
    raise ToolArgumentError(f"'{name}' must be an integer, got {value!r}")


def validate_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
    """Check and coerce `arguments` against the spec's JSON schema (the subset the tools use)."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    props: dict = spec.parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        raise ToolArgumentError(f"unknown argument(s) {', '.join(unknown)}; {spec.name} accepts: {', '.join(props)}")
    missing = [r for r in spec.parameters.get("required", []) if arguments.get(r) in (None, "")]
    if missing:
        raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
    clean: dict[str, Any] = {}
    for name, value in arguments.items():
        if value is None:
            continue
        schema = props[name]
        kind = schema.get("type")
        if kind == "integer":
            value = _as_int(name, value)
        elif kind == "string":
            if not isinstance(value, str):
                raise ToolArgumentError(f"'{name}' must be a string, got {value!r}")
            value = value.strip()
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise ToolArgumentError(f"'{name}' must be true or false")
        elif kind == "array":
            if not isinstance(value, list):
                value = [value]
            value = [_as_int(name, v) for v in value][:50]
        elif kind == "object":
            simple = (str, int, float, bool)
            if not isinstance(value, dict) or not all(
                    isinstance(v, simple) or (isinstance(v, list) and 0 < len(v) <= 50 and all(isinstance(x, simple) for x in v))
                    for v in value.values()):
                raise ToolArgumentError(f"'{name}' must be an object of simple values or lists of them, "
                                        f"e.g. {{\"category\": \"travel\"}} or {{\"source\": [\"A\", \"B\"]}}")
        if "enum" in schema and value not in schema["enum"]:
            raise ToolArgumentError(f"'{name}' must be one of {schema['enum']}, got {value!r}")
        clean[name] = value
    return clean


# --- Tool implementations -----------------------------------------------------------------------

_ID_LIST = {"type": "array", "items": {"type": "integer"}}


def _render_hits(deps: ToolDeps, chunks: list[RetrievedChunk], extra: dict) -> ToolOutcome:
    """Put chunks in front of the model as delimited data within the output budget, and remember them."""
    results: list[dict] = []
    overflow: list[RetrievedChunk] = []
    used = 0
    for chunk in chunks:
        block = chunk_block(chunk, deps.budgets.chunk_chars)
        if results and used + len(block) > deps.budgets.tool_output_chars:
            overflow.append(chunk)
            continue
        used += len(block)
        deps.retrieved.setdefault(chunk.chunk_id, chunk)
        item = {"chunk_id": chunk.chunk_id, "cite_as": f"[c:{chunk.chunk_id}]", "document": chunk.title,
                "document_id": chunk.document_id, "corpus": chunk.corpus_name, "section": chunk.locator,
                "score": round(chunk.score, 4), "text": block}
        if chunk.metadata:
            item["metadata"] = {k: v for k, v in chunk.metadata.items() if isinstance(v, str | int | float | bool)}
        if chunk.flags:
            item["flagged"] = list(chunk.flags)
        results.append(item)
    content = {"notice": DATA_NOTICE, **extra, "results": results}
    if overflow:
        content["omitted"] = f"{len(overflow)} more result(s) not shown: tool output budget reached; narrow the search"
    if not results:
        content["results"] = []
        content["note"] = "no matching text in the documents you can see"
    shown = [c for c in chunks if c.chunk_id in {r["chunk_id"] for r in results}]
    return ToolOutcome(content=content, chunk_ids=tuple(c.chunk_id for c in shown),
                       content_hashes=tuple(c.content_hash for c in shown), overflow=tuple(overflow),
                       ranked_ids=tuple(c.chunk_id for c in chunks))


def _hit_to_chunk(hit: retrieval.SearchHit) -> RetrievedChunk:
    return RetrievedChunk(chunk_id=hit.chunk_id, document_id=hit.document_id, content_hash=hit.content_hash, text=hit.text,
                          title=hit.document_title, locator=hit.locator, corpus_name=hit.corpus_name, score=hit.score,
                          flags=tuple(hit.flags), metadata=hit.metadata)


def _row_to_chunk(row: dict) -> RetrievedChunk:
    return RetrievedChunk(chunk_id=row["id"], document_id=row["document_id"], content_hash=row["content_hash"], text=row["text"],
                          title=row["document__title"], locator=row["locator"], corpus_name=row["corpus__name"],
                          flags=tuple(row["flags"] or ()), metadata=row["document__metadata"] or {})


def search(deps: ToolDeps, *, query: str, k: int = 5, mode: str = "hybrid", corpus_ids: list[int] | None = None,
           document_ids: list[int] | None = None, department_ids: list[int] | None = None, metadata: dict | None = None,
           date_after: str | None = None, date_before: str | None = None) -> ToolOutcome:
    """Search the knowledge base the caller can see; filters only narrow it. Nearest first."""
    for name, value in (("date_after", date_after), ("date_before", date_before)):
        if value and not _ISO_DATE.match(value):
            raise ToolArgumentError(f"'{name}' must be an ISO date like 2025-01-31, got {value!r}")
    clamped = min(max(int(k), 1), deps.budgets.max_k)
    corpus_ids = deps.within(corpus_ids)
    if corpus_ids == []:
        return _render_hits(deps, [], {"query": query, "note": "none of these corpora is among the ones chosen for this question"})
    key = json.dumps({"q": " ".join(query.casefold().split()), "k": clamped, "mode": mode, "c": sorted(corpus_ids or []),
                      "d": sorted(document_ids or []), "dep": sorted(department_ids) if department_ids is not None else None,
                      "m": metadata, "a": date_after, "b": date_before}, sort_keys=True, default=str)
    if key in deps.search_cache:
        cached = deps.search_cache[key]
        return dataclasses.replace(cached, cached=True, content={**cached.content, "note": "identical search already run in "
                                   "this conversation: same results returned, not searched again"})
    scope = deps.scope.narrowed(department_ids) if department_ids is not None else deps.scope
    filters = retrieval.SearchFilters(
        corpus_ids=tuple(corpus_ids) if corpus_ids else None, document_ids=tuple(document_ids) if document_ids else None,
        department_ids=tuple(department_ids) if department_ids is not None else None, metadata=metadata or None,
        date_after=date_after or None, date_before=date_before or None)
    # Not inside activate(): search() sets the RLS tenant on every statement itself, and outside a
    # transaction it may run its two hybrid rankings at once on two connections (kb.retrieval.retrieve).
    result = retrieval.search(scope, query, k=clamped, mode=mode, filters=filters, rerank=True,  # type: ignore[arg-type]
                              rerank_query=_sentence_query(deps, query, metadata, date_after, date_before))
    extra: dict = {"query": query}
    if clamped != k:
        extra["note_k"] = f"k clamped to {clamped}"
    outcome = _render_hits(deps, [_hit_to_chunk(h) for h in result.hits], extra)
    effective = {"scope": {k_: v for k_, v in scope.as_dict().items() if k_ != "principal"}, "applied": result.applied_filter,
                 "k": clamped, "mode": mode, "path": result.path}
    outcome = dataclasses.replace(outcome, effective_filter=effective)
    deps.search_cache[key] = outcome
    return outcome


def _sentence_query(deps: ToolDeps, query: str, metadata: dict | None, after: str | None, before: str | None) -> str:
    """What the sentence re-rank scores against: for a search narrowed by metadata values or a date,
    the query without the facet values and dates it names. The filter already matched those; left
    in, they pull every candidate's sentences alike and blur the ranking (docs/evaluation.md)."""
    if not (metadata or after or before):
        return query
    own = [v for value in (metadata or {}).values() for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]
    return without_facets(query, [*deps.facet_values, *own]) or query


def read(deps: ToolDeps, *, chunk_id: int | None = None, neighbours: int = 1, document_id: int | None = None,
         section: str = "", page: int | None = None) -> ToolOutcome:
    """A chunk with its neighbours, or the chunks of a document, of one section (by heading text) or page."""
    if chunk_id is None and document_id is None:
        raise ToolArgumentError("give either chunk_id (with optional neighbours) or document_id (with optional section or page)")
    with activate(deps.scope):
        if chunk_id is not None:
            rows = chunks_around(deps.scope, chunk_id, min(max(neighbours, 0), 3))
            missing = f"chunk c:{chunk_id} not found"
        else:
            rows = document_section(deps.scope, int(document_id), section, limit=deps.budgets.max_k, page=page)  # type: ignore[arg-type]
            missing = f"document {document_id} not found" + (f" or it has no section matching {section!r}" if section else "") + \
                (f" or it has no page {page}" if page is not None else "")
    if deps.corpus_ids is not None:  # a chunk of a corpus not chosen for this question reads as missing
        rows = [r for r in rows if r["corpus_id"] in deps.corpus_ids]
    if not rows:
        return ToolOutcome.failed(missing)
    outcome = _render_hits(deps, [_row_to_chunk(r) for r in rows], {})
    return dataclasses.replace(outcome, effective_filter={"scope": {k: v for k, v in deps.scope.as_dict().items() if k != "principal"}})


def search_pages(deps: ToolDeps, *, query: str, k: int = 5, corpus_ids: list[int] | None = None,
                 document_ids: list[int] | None = None) -> ToolOutcome:
    """Pages (PDF) or sections (heading path) of the visible documents ranked for `query`, each with
    its locator and its best chunk to cite: the scoped search's hits grouped (agents.summaries.group_pages)."""
    clamped = min(max(int(k), 1), deps.budgets.max_k)
    corpus_ids = deps.within(corpus_ids)
    if corpus_ids == []:
        return _render_hits(deps, [], {"query": query, "pages": []})
    filters = retrieval.SearchFilters(corpus_ids=tuple(corpus_ids) if corpus_ids else None,
                                      document_ids=tuple(document_ids) if document_ids else None)
    result = retrieval.search(deps.scope, query, k=min(retrieval.MAX_K, max(PAGE_CANDIDATES, 4 * clamped)), mode="hybrid",
                              filters=filters)
    groups = group_pages(result.hits)[:clamped]
    pages = [{"document": g.title, "document_id": g.document_id, "page": g.page, "section": g.locator,
              "score": round(g.score, 4), "matching_chunks": len(g.hits), "cite_as": f"[c:{g.hits[0].chunk_id}]"} for g in groups]
    outcome = _render_hits(deps, [_hit_to_chunk(g.hits[0]) for g in groups], {"query": query, "pages": pages})
    return dataclasses.replace(outcome, effective_filter={"scope": {k_: v for k_, v in deps.scope.as_dict().items() if k_ != "principal"},
                                                          "applied": result.applied_filter, "k": clamped, "path": result.path})


def summarise_document(deps: ToolDeps, *, document_id: int | None = None, title: str = "") -> ToolOutcome:
    """A visible document's summary, by id or exact title: its central sentences in document order, each
    citable as [c:<id>] of the chunk it is quoted from (agents.summaries). Another tenant's or department's
    document is "not found"."""
    if document_id is None and not title:
        raise ToolArgumentError("give document_id (from search_pages or search) or the document's exact title")
    if document_id is None:
        document_id = document_titled(deps.scope, title, deps.corpus_ids)
        if document_id is None:
            return ToolOutcome.failed("no document you may see has that exact title: find it with search_pages")  # the title is not echoed
    summary = summarise(deps.scope, int(document_id), deps.corpus_ids)
    if summary is None:
        return ToolOutcome.failed(f"document {document_id} not found")
    if not summary.sentences:  # a document the caller sees, so saying so reveals nothing
        return ToolOutcome.failed(f"document {document_id} has no sentence that can be quoted in a summary (its chunks are "
                                  "empty or flagged as possible instructions to a model): search it instead")
    by_id = {h.chunk_id: _hit_to_chunk(h) for h in summary.hits}
    for chunk in by_id.values():  # the model is shown each sentence with its chunk id: it may cite the chunk
        deps.retrieved.setdefault(chunk.chunk_id, chunk)
    lines = [{"cite_as": f"[c:{s.chunk_id}]", "section": s.locator,
              "text": chunk_block(dataclasses.replace(by_id[s.chunk_id], text=s.text), deps.budgets.chunk_chars)}
             for s in summary.sentences]
    content = {"notice": DATA_NOTICE, "document": summary.title, "document_id": summary.document_id,
               "how": "the document's most central sentences, in document order, quoted from its chunks", "summary": lines}
    cited = list(dict.fromkeys(s.chunk_id for s in summary.sentences))
    return ToolOutcome(content=content, chunk_ids=tuple(cited), content_hashes=tuple(by_id[c].content_hash for c in cited),
                       cached=summary.cached,
                       effective_filter={"scope": {k: v for k, v in deps.scope.as_dict().items() if k != "principal"}})


PAGE_CANDIDATES = 30  # hits grouped into pages: enough for several hits per page


def list_corpora(deps: ToolDeps) -> ToolOutcome:
    """The corpora (document collections) the caller can see, with their ids for narrowing searches."""
    with activate(deps.scope):
        corpora = corpus_overview(deps.scope)
    if deps.corpus_ids is not None:
        corpora = [c for c in corpora if c["id"] in deps.corpus_ids]
    return ToolOutcome(content={"corpora": corpora})


def facets(deps: ToolDeps, *, corpus_ids: list[int] | None = None) -> ToolOutcome:
    """What the caller's documents can be narrowed by: enumeration values per metadata key, and their date range."""
    corpus_ids = deps.within(corpus_ids)
    if corpus_ids == []:
        return ToolOutcome(content={"enumerations": {}, "dates": None, "other_keys": []})
    with activate(deps.scope):
        values = metadata_facets(deps.scope, corpus_ids)
    deps.facet_values = tuple(dict.fromkeys([*deps.facet_values, *Facets.from_tool(values).values()]))
    return ToolOutcome(content=values)


def check_grounding(deps: ToolDeps, *, draft: str) -> ToolOutcome:
    """Verify a draft answer's citations against the chunks retrieved so far in this run."""
    return ToolOutcome(content=grounding_report(draft, deps.retrieved))


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    fn: Callable[..., ToolOutcome]


TOOLS: dict[str, Tool] = {t.spec.name: t for t in (
    Tool(ToolSpec("search", "Search the organisation's documents. Returns chunks with ids to cite as [c:<id>]. Run one search per "
                  "part of a multi-part question. Optional filters only narrow what you can see.", {
                      "type": "object", "required": ["query"], "properties": {
                          "query": {"type": "string", "description": "What to look for, in plain words."},
                          "k": {"type": "integer", "description": "How many chunks (1-10, default 5)."},
                          "mode": {"type": "string", "enum": ["hybrid", "vector", "keyword"], "description": "Default hybrid."},
                          "corpus_ids": {**_ID_LIST, "description": "Only these corpora (ids from list_corpora)."},
                          "document_ids": {**_ID_LIST, "description": "Only these documents."},
                          "department_ids": {**_ID_LIST, "description": "Only documents of these departments."},
                          "metadata": {"type": "object", "description": "Exact metadata matches, e.g. {\"category\": \"travel\"}; "
                                       "a list means any of, e.g. {\"source\": [\"A\", \"B\"]}."},
                          "date_after": {"type": "string", "description": "ISO date; only documents dated on/after it "
                                                                           "(their corpus's date, e.g. effective date)."},
                          "date_before": {"type": "string", "description": "ISO date; only documents dated before it."},
                      }}), search),
    Tool(ToolSpec("read", "Read a chunk with its neighbouring chunks, or a section of a document by heading text.", {
        "type": "object", "properties": {
            "chunk_id": {"type": "integer", "description": "A chunk id from search results."},
            "neighbours": {"type": "integer", "description": "Chunks before and after to include (0-3, default 1)."},
            "document_id": {"type": "integer", "description": "Read this document instead (with optional section or page)."},
            "section": {"type": "string", "description": "Heading text of the section to read."},
            "page": {"type": "integer", "description": "Page number of the document to read (PDF documents)."},
        }}), read),
    Tool(ToolSpec("search_pages", "Which pages or sections of the documents talk about something: pages (or sections) ranked "
                  "for a query, each with its document, locator and a chunk id to cite. For 'which pages/sections ...' "
                  "and 'list all ...' questions; then read a page or section with read.", {
                      "type": "object", "required": ["query"], "properties": {
                          "query": {"type": "string", "description": "What the pages should talk about."},
                          "k": {"type": "integer", "description": "How many pages or sections (1-10, default 5)."},
                          "corpus_ids": {**_ID_LIST, "description": "Only these corpora."},
                          "document_ids": {**_ID_LIST, "description": "Only these documents."},
                      }}), search_pages),
    Tool(ToolSpec("summarise_document", "A document's summary: its main sentences in order, each with the chunk id to cite "
                  "as [c:<id>]. For 'summarise X' or 'main points of X': by its exact title, or its id from search_pages.", {
                      "type": "object", "properties": {
                          "document_id": {"type": "integer", "description": "The document to summarise."},
                          "title": {"type": "string", "description": "Or its exact title."}}}),
         summarise_document),
    Tool(ToolSpec("list_corpora", "List the document collections you can search, with ids.",
                  {"type": "object", "properties": {}}), list_corpora),
    Tool(ToolSpec("facets", "Which metadata values (per key) and which date range the documents you can see have: "
                            "what the search tool's metadata and date filters can narrow by.", {
        "type": "object", "properties": {"corpus_ids": {**_ID_LIST, "description": "Only these corpora."}}}), facets),
    Tool(ToolSpec("check_grounding", "Check a draft answer's [c:<id>] citations and quotes against what you retrieved.", {
        "type": "object", "required": ["draft"], "properties": {"draft": {"type": "string", "description": "The draft answer."}}}),
        check_grounding),
)}

TOOL_SPECS: tuple[ToolSpec, ...] = tuple(t.spec for t in TOOLS.values())


def run_tool(deps: ToolDeps, call: ToolCall) -> ToolOutcome:
    """Execute one tool call. Never raises for the model's mistakes: they come back as errors it can read."""
    if call.arguments_error:
        return ToolOutcome.failed(f"could not parse the arguments of {call.name}: {call.arguments_error}. Send valid JSON.")
    tool = TOOLS.get(call.name)
    if tool is None:
        return ToolOutcome.failed(f"unknown tool {call.name!r}; available tools: {', '.join(TOOLS)}")
    try:
        arguments = validate_arguments(tool.spec, call.arguments)
        return tool.fn(deps, **arguments)
    except ToolArgumentError as exc:
        return ToolOutcome.failed(f"{call.name}: {exc}")
    except Exception:
        log.exception("tool %s failed", call.name)
        return ToolOutcome.failed(f"{call.name} failed with an internal error; try other arguments or answer with what you have")
