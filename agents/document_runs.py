"""Questions about documents as wholes, answered by the strategies that build their context in code
(classic, pipeline, auto): "summarise X" and "which pages / sections ... X", "list all ... X"
(agents.planning.document_request).

    summary  summarise_document of the document the question names by its title in quotes; else
             search_pages for the subject -> the document it means (planning.pick_document) ->
             summarise_document; then an answer call shown its sentences, each with its chunk id
    pages    search_pages for the subject -> an answer call shown each page's best chunk

Both tool calls are traced like a model's (agents.steps.call_tool) and obey the run's scope and
tool budget. The agentic strategy reaches the same tools through the model. None when the request
cannot be served this way (no page matches, no document found): the strategy then runs as usual.
"""

from __future__ import annotations

from agents.citations import neutralise_markers
from agents.messages import ContextChunk, ToolCall, UserMessage
from agents.planning import DocumentRequest, document_request, pick_document
from agents.prompts import DATA_NOTICE, pages_prompt, summary_prompt
from agents.steps import RunState, call_model, call_tool
from agents.tools import ToolOutcome

PAGES_K = 8  # pages or sections looked at: for a summary, where the document is; for a pages request, what is listed
_BLOCK_TEXT = "text"


def document_answer(state: RunState, strategy: str) -> str | None:
    """The answer when the question is a document request that `strategy` answers in code (classic,
    pipeline, auto; agentic without tool calls), with `state.strategy` set to the one used; else None."""
    request = document_request(state.question)
    if request is None or strategy not in ("auto", "classic", "pipeline", "agentic") or (strategy == "agentic" and state.tools_ok):
        return None  # agentic's model calls the tools itself
    state.strategy = "classic" if strategy == "classic" else "pipeline"
    return run_document_request(state, request)


def run_document_request(state: RunState, request: DocumentRequest) -> str | None:
    """The answer to a document request, or None (module docstring)."""
    state.iterations += 1
    if request.kind == "summary" and request.quoted:  # a document named by its title
        summary = _tool(state, "summarise_document", {"title": request.subject})
        if summary is not None and not summary.error:
            return _answer_summary(state, summary)
    pages = _tool(state, "search_pages", {"query": request.subject, "k": PAGES_K})
    found = pages.content.get("pages", []) if pages is not None and not pages.error else []
    if not found:
        return None
    if request.kind == "pages":
        return _answer_pages(state, pages, found)  # type: ignore[arg-type]
    document_id = pick_document(request.subject, [(p["document_id"], p["document"]) for p in found])
    summary = _tool(state, "summarise_document", {"document_id": document_id})
    if summary is None or summary.error:
        return None
    return _answer_summary(state, summary)


def _tool(state: RunState, name: str, arguments: dict) -> ToolOutcome | None:
    if state.tool_calls >= state.budgets.max_tool_calls:
        return None
    state.tool_calls += 1
    return call_tool(state, ToolCall(id=f"{name}-{state.tool_calls}", name=name, arguments=arguments))


def _answer_summary(state: RunState, summary: ToolOutcome) -> str:
    """The answer call shown the summary's sentences (the context records exactly those: each sentence
    under its chunk's id, which the citation check reads in full from the run's retrieved chunks)."""
    title = str(summary.content.get("document", ""))
    items = summary.content.get("summary", [])
    context = []
    for item in items:
        chunk_id = int(str(item["cite_as"]).strip("[]c:"))
        chunk = state.retrieved[chunk_id]
        context.append(ContextChunk(chunk_id, neutralise_markers(_inner(item[_BLOCK_TEXT])), chunk.title, chunk.locator,
                                    chunk.score, chunk.flags, chunk.metadata))
    rendered = DATA_NOTICE + "\n\n" + "\n\n".join(item[_BLOCK_TEXT] for item in items)
    turn = call_model(state, "answer", [UserMessage(summary_prompt(state.question, title, rendered))], tools_enabled=False,
                      context=tuple(context))
    return turn.text


def _answer_pages(state: RunState, pages: ToolOutcome, found: list[dict]) -> str:
    """The answer call shown each page or section found with its best chunk (those within the tool's output budget)."""
    blocks = {r["chunk_id"]: r[_BLOCK_TEXT] for r in pages.content.get("results", [])}
    lines, context = [], []
    for page in found:
        chunk_id = int(str(page["cite_as"]).strip("[]c:"))
        if chunk_id not in blocks:
            continue
        chunk = state.retrieved[chunk_id]
        where = f"p. {page['page']}" if page.get("page") is not None else page.get("section") or "whole document"
        lines.append(f"- {page['document']} ({where}), {page['matching_chunks']} matching chunk(s):\n{blocks[chunk_id]}")
        context.append(ContextChunk(chunk_id, neutralise_markers(chunk.text), chunk.title, chunk.locator, chunk.score,
                                    chunk.flags, chunk.metadata))
    rendered = DATA_NOTICE + "\n\n" + "\n\n".join(lines)
    turn = call_model(state, "answer", [UserMessage(pages_prompt(state.question, rendered))], tools_enabled=False,
                      context=tuple(context))
    return turn.text


def _inner(block: str) -> str:
    """The text inside a <document_data> block."""
    start = block.find(">") + 1
    end = block.rfind("</document_data>")
    return block[start:end if end >= 0 else len(block)].strip()
