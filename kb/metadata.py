"""What text and document metadata from outside may be: the one copy of these rules, used by the API's
serializers, the admin's upload form and the upload service alike.

PostgreSQL text holds no NUL and UTF-8 no lone surrogate; jsonb refuses non-finite numbers; hostile
nesting must not exhaust the stack. Each check returns the first reason a value is unfit (a sentence
for the field's error), or None.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

# Upload metadata (one JSON object applied to every file): stored per document and matched by filters.
MAX_METADATA_CHARS = 64 * 1024
MAX_METADATA_DEPTH = 8
# The one message for metadata (or a metadata filter) that is not a JSON object.
NOT_A_JSON_OBJECT = "must be a JSON object"


class MetadataRejected(ValueError):
    """Metadata that cannot be stored; the message says why (for the `metadata` field)."""


def text_problem(text: str) -> str | None:
    """Why a string cannot be stored or matched as text (PostgreSQL text holds no NUL, UTF-8 no lone surrogate)."""
    if "\x00" in text:
        return "must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None


def json_problem(value: object, *, max_depth: int, max_string: int | None = None, check_text: bool = False) -> str | None:
    """The first reason `value` (parsed JSON) is unfit, else None: nesting deeper than `max_depth`,
    non-finite numbers (jsonb refuses them), and with `check_text` keys or strings that `text_problem`
    refuses or longer than `max_string`. Iterative, so hostile nesting cannot exhaust the stack."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
            strings: Iterable[str] = item.keys() if isinstance(item, dict) and check_text else ()
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite"
        else:
            strings = (item,) if check_text and isinstance(item, str) else ()
        for text in strings:
            if problem := text_problem(text):
                return problem
            if max_string is not None and len(text) > max_string:
                return f"strings must be at most {max_string} characters"
    return None


def metadata_problem(value: object) -> str | None:
    """Why `value` cannot be a document's metadata: not a JSON object, too deep, unstorable text."""
    if not isinstance(value, dict):
        return NOT_A_JSON_OBJECT
    return json_problem(value, max_depth=MAX_METADATA_DEPTH, check_text=True)


def parse_metadata(raw: str) -> dict:
    """A document's metadata from its JSON text ({} for blank); MetadataRejected saying why otherwise."""
    raw = (raw or "").strip()
    if not raw:
        return {}
    if len(raw) > MAX_METADATA_CHARS:
        raise MetadataRejected(f"at most {MAX_METADATA_CHARS} characters of JSON")
    try:
        value = json.loads(raw)
    except RecursionError:
        raise MetadataRejected(f"nested deeper than {MAX_METADATA_DEPTH} levels") from None
    except ValueError:
        raise MetadataRejected(NOT_A_JSON_OBJECT) from None
    if problem := metadata_problem(value):
        raise MetadataRejected(problem)
    return value
