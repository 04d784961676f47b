"""An answer's text as safe HTML for the chat page. Pure: no ORM, no I/O.

The text is Markdown (CommonMark, with tables and strikethrough) rendered by markdown-it-py with raw
HTML off (written as text) and images off (no request leaves for a model-chosen address), then
sanitised by nh3 (Ammonia) to an allowlist of elements and attributes: links keep only http, https
and mailto addresses and get rel="noopener noreferrer nofollow"; scripts, styles, event attributes
and every other element or attribute are dropped. The answer's text comes from documents and
models, so it is never trusted, whichever provider wrote it.

A citation marker `[c:N]` becomes an empty `<button type="button" class="cite" data-chunk="N">`,
which the page numbers and wires to its source panel. A "not enough evidence" answer is rendered
without its NOT_ENOUGH_EVIDENCE prefix (the page labels it).
"""

from __future__ import annotations

import re

import nh3
from markdown_it import MarkdownIt

NOT_ENOUGH_EVIDENCE = "NOT_ENOUGH_EVIDENCE"  # agents.citations' marker, repeated: that module reads the ORM, this one must not
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}) \
    .enable(["table", "strikethrough"]).disable("image")
_MARKER = re.compile(r"\[c:(\d{1,18})\]")
_NOT_ENOUGH = re.compile(rf"^\s*{NOT_ENOUGH_EVIDENCE}:?\s*")

TAGS = frozenset({"p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol", "li",
                  "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody", "tr", "th", "td", "button"})
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "button": {"type", "class", "data-chunk"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})


def answer_html(text: str) -> str:
    """The answer (Markdown) as sanitised HTML, citation markers as `button.cite[data-chunk]`."""
    shown = _NOT_ENOUGH.sub("", text or "", count=1)
    html = _MARKER.sub(lambda m: f'<button type="button" class="cite" data-chunk="{m.group(1)}"></button>',
                       _MARKDOWN.render(shown))
    return nh3.clean(html, tags=set(TAGS), attributes={k: set(v) for k, v in ATTRIBUTES.items()},
                     url_schemes=set(URL_SCHEMES), link_rel="noopener noreferrer nofollow", strip_comments=True)
