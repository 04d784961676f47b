"""Answers as HTML for the chat (agents.rendering): Markdown rendered, then sanitised to an allowlist,
whatever a document or a model put in the text."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from agents.rendering import answer_html

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="https://example.com" onclick="alert(1)">x</a>',
    "[click](javascript:alert(1))",
    "[click](  JaVaScRiPt:alert(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[click](vbscript:msgbox(1))",
    '<div style="background:url(javascript:alert(1))" onmouseover="alert(1)">hover</div>',
    "![pixel](https://tracker.example/p.png)",
    '<iframe src="https://evil.example"></iframe>',
    "<svg onload=alert(1)>",
    '[x](https://ok.example "a\\" onmouseover=\\"alert(1)")',
    "<button onclick=alert(1) class=cite data-chunk=1>[c:1]</button>",
]


class Elements(HTMLParser):
    """Every element and attribute of an HTML text, as a browser's parser sees them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_markup_never_becomes_live_html(text):
    html = answer_html(f"Before.\n\n{text}\n\nAfter [c:7].")
    for tag, attrs in Elements(html).found:
        assert tag in {"p", "a", "button", "strong", "em", "code"}, html
        assert not [a for a in attrs if a.startswith("on") or a == "style"], html
        assert not re.match(r"\s*(javascript|data|vbscript):", attrs.get("href") or "", re.I), html
        if tag == "button":  # only the citation buttons the renderer makes
            assert attrs == {"type": "button", "class": "cite", "data-chunk": attrs["data-chunk"]}
    assert '<button type="button" class="cite" data-chunk="7"></button>' in html


def test_markdown_is_rendered_with_citations_as_buttons():
    html = answer_html('1. How much is a hotel night in Paris:\n   - "Hotels are paid up to EUR 180." [c:3] (Travel policy)\n'
                       "\n**Note**: see [the policy](https://intranet.example/travel).")
    assert "<ol>" in html and "<ul>" in html and "<strong>Note</strong>" in html
    assert '<button type="button" class="cite" data-chunk="3"></button>' in html
    assert '<a href="https://intranet.example/travel" rel="noopener noreferrer nofollow">the policy</a>' in html


def test_a_not_enough_evidence_answer_is_rendered_without_its_marker():
    html = answer_html('NOT_ENOUGH_EVIDENCE: no sentence in the documents you can see answers "x".')
    assert "NOT_ENOUGH_EVIDENCE" not in html and html.startswith("<p>no sentence")
