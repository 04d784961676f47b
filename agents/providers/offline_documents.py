"""The offline provider's side of document requests (agents.planning.document_request): which page
and summary tools it calls as the agent, and its extractive answers from what they returned.

    summary  quotes each summary sentence (from summarise_document's result, or, in a strategy's
             answer call, from its context: one sentence per chunk) with its citation, in order
    pages    per page or section found, its document and locator and the sentence of its best
             chunk that holds most of the subject's words, quoted and cited; pages holding none are left out

Pure: reads the request only. None when there is nothing to answer from: the provider's usual
composition takes over (and says NOT_ENOUGH_EVIDENCE when nothing answers).
"""

from __future__ import annotations

from agents.lexical import looks_like_instructions, sentences, terms
from agents.messages import AssistantMessage, ModelRequest, ToolCall, ToolResultMessage
from agents.planning import DocumentRequest, pick_document
from agents.providers.quoting import shown, unwrap

PAGES_K = 8
MAX_SUMMARY_LINES = 8


def document_calls(request: ModelRequest, wanted: DocumentRequest) -> list[ToolCall]:
    """The agent's next tool calls for a document request: for a summary of a document named in
    quotes, summarise_document by that title; else (or when no document has it) search_pages, then
    for a summary summarise_document of the document it means; [] once it has what it needs."""
    made = [c for m in request.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    asked = {c.name for c in made}
    if wanted.kind == "summary" and wanted.quoted and "summarise_document" not in asked:
        return [ToolCall("offline-summary-title", "summarise_document", {"title": wanted.subject})]
    if wanted.kind == "summary" and _last_result(request, "summarise_document") is not None:
        return []
    if "search_pages" not in asked:
        return [ToolCall("offline-pages", "search_pages", {"query": wanted.subject, "k": PAGES_K})]
    if wanted.kind != "summary" or any(c.name == "summarise_document" and "document_id" in c.arguments for c in made):
        return []
    pages = _last_result(request, "search_pages")
    ranked = [(int(p["document_id"]), str(p["document"])) for p in (pages or {}).get("pages", []) if isinstance(p, dict)]
    document_id = pick_document(wanted.subject, ranked)
    return [] if document_id is None else [ToolCall("offline-summary", "summarise_document", {"document_id": document_id})]


def compose_document_answer(request: ModelRequest, wanted: DocumentRequest) -> str | None:
    """The extractive answer to a document request (module docstring), or None."""
    if wanted.kind == "summary":
        return _compose_summary(request)
    return _compose_pages(request, wanted.subject)


def _compose_summary(request: ModelRequest) -> str | None:
    result = _last_result(request, "summarise_document")
    if result is not None:
        title = str(result.get("document", ""))
        picked = [(_id(item["cite_as"]), _unwrap(str(item["text"]))) for item in result.get("summary", []) if isinstance(item, dict)]
    else:
        title = request.context[0].title if request.context else ""
        picked = [(c.chunk_id, first[0]) for c in request.context if not c.flags and (first := sentences(c.text))]
    lines = [f'- "{_shown(text)}" [c:{cid}]' for cid, text in picked if text and not looks_like_instructions(text)]
    if not lines:
        return None
    return f"Summary of {title}:\n" + "\n".join(lines[:MAX_SUMMARY_LINES])


def _compose_pages(request: ModelRequest, subject: str) -> str | None:
    wanted = terms(subject)
    found: list[tuple[int, str, str, str]] = []  # (chunk id, document, locator, text)
    result = _last_result(request, "search_pages")
    if result is not None:
        texts = {int(r["chunk_id"]): (_unwrap(str(r["text"])), bool(r.get("flagged"))) for r in result.get("results", [])}
        for page in result.get("pages", []):
            cid = _id(page["cite_as"])
            if cid in texts and not texts[cid][1]:
                where = f"p. {page['page']}" if page.get("page") is not None else str(page.get("section") or "")
                found.append((cid, str(page["document"]), where, texts[cid][0]))
    else:
        found = [(c.chunk_id, c.title, c.locator, c.text) for c in request.context if not c.flags]
    lines = []
    for cid, title, where, text in found:
        scored = [(len(wanted & terms(s)), s) for s in sentences(text) if not looks_like_instructions(s)]
        best = max(scored, key=lambda x: x[0], default=(0, ""))
        if best[0]:
            lines.append(f'- {title}{f" ({where})" if where else ""}: "{_shown(best[1])}" [c:{cid}]')
    if not lines:
        return None
    return "Pages and sections that match:\n" + "\n".join(lines)


def _last_result(request: ModelRequest, name: str) -> dict | None:
    for m in reversed(request.messages):
        if isinstance(m, ToolResultMessage) and m.name == name and isinstance(m.content, dict) and not m.content.get("error"):
            return m.content
    return None


def _id(cite_as: object) -> int:
    return int(str(cite_as).strip("[] ").removeprefix("c:"))


def _unwrap(block: str) -> str:
    return unwrap(block).strip()


def _shown(sentence: str) -> str:
    """Quoted on one line (agents.providers.quoting.shown)."""
    return " ".join(shown(sentence).split())
