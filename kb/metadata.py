"""Document metadata, in and out: what text and metadata from outside may be, and what the stored
metadata lets a scope's documents be narrowed by (facets).

In: the one copy of the rules, used by the API's serializers, the admin's upload form and the upload
service alike. PostgreSQL text holds no NUL and UTF-8 no lone surrogate; jsonb refuses non-finite
numbers; hostile nesting must not exhaust the stack. Each check returns the first reason a value is
unfit (a sentence for the field's error), or None.

Out: `scope_facets(scope, corpus_ids=None, max_values=50)` returns

    {"enumerations": {key: {value: document count, ...}, ...},
     "dates": {"key": date key, "earliest": ISO date-time, "latest": ISO date-time} | None,
     "other_keys": [metadata keys that are neither, sorted]}

over the ready documents the scope sees (kb.access.visible_documents, so tenant and department
limits hold), optionally of some corpora only. Enumerations are the corpora's declared `facet_keys`
and, besides them, keys discovered from the data (`enumeration_keys`): string values, few distinct
ones (at most `max_values`) and at least two documents per value on average, so titles, urls, ids
and other free text are left out by their shape, not their name. Values are strings, most documents
first (at most `max_values` per key); a search narrows to one with `SearchFilters(metadata={key: value})`.
`dates.key` is the corpora's `date_key` when they share one, else "dated_at"; the range is over
Document.dated_at. Counting is done in PostgreSQL (GROUP BY over jsonb), never per document in Python.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.db import connections
from django.db.models import Max, Min

from kb.access import visible_corpora, visible_documents
from kb.models import DocumentStatus
from tenants.scope import Scope, activate

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


# Facets: what the stored metadata lets a scope's documents be narrowed by (see the module docstring).


@dataclass(frozen=True)
class KeyStats:
    """One metadata key over a set of documents."""

    documents: int  # documents holding the key with a string value
    distinct: int  # distinct string values


def enumeration_keys(stats: Mapping[str, KeyStats], declared: Iterable[str], *, max_values: int,
                     exclude: Iterable[str] = ()) -> list[str]:
    """The keys to offer as enumerations: the declared ones present, then the discovered ones
    (at most `max_values` distinct values and at least two documents per value), by name."""
    excluded = set(exclude)
    present = [k for k in dict.fromkeys(declared) if k in stats and k not in excluded]
    found = sorted(k for k, s in stats.items() if k not in excluded and k not in present and s.documents >= 2
                   and s.distinct <= max_values and 2 * s.distinct <= s.documents)
    return present + found


def scope_facets(scope: Scope, corpus_ids: Iterable[int] | None = None, max_values: int = 50) -> dict:
    """The facets of the ready documents `scope` sees (of `corpus_ids` when given): see the module
    docstring for the shape. Runs inside activate(scope) (opens it otherwise)."""
    with activate(scope):
        corpora = visible_corpora(scope)
        documents = visible_documents(scope).filter(status=DocumentStatus.READY)
        if corpus_ids:
            ids = [int(c) for c in corpus_ids]
            corpora, documents = corpora.filter(pk__in=ids), documents.filter(corpus_id__in=ids)
        declared = list(corpora.values_list("date_key", "facet_keys"))
        date_keys = sorted({d for d, _ in declared if d})
        facet_keys = [k for _, keys in declared for k in (keys or []) if isinstance(k, str)]
        docs_sql, docs_params = documents.values("metadata").query.sql_with_params()
        with connections["default"].cursor() as cur:
            cur.execute(f"SELECT e.key, count(*) FILTER (WHERE jsonb_typeof(e.value) = 'string'), "  # noqa: S608  (docs_sql: the ORM's compiled SQL, its values parameters)
                        f"count(DISTINCT e.value) FILTER (WHERE jsonb_typeof(e.value) = 'string') "
                        f"FROM ({docs_sql}) d CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(d.metadata) = 'object' "
                        f"THEN d.metadata ELSE '{{}}'::jsonb END) e GROUP BY e.key", docs_params)
            stats = {key: KeyStats(int(n), int(distinct)) for key, n, distinct in cur.fetchall()}
            keys = enumeration_keys(stats, facet_keys, max_values=max_values, exclude=date_keys)
            enumerations: dict[str, dict[str, int]] = {k: {} for k in keys}
            if keys:
                cur.execute(f"SELECT key, value, n FROM (SELECT e.key, e.value #>> '{{}}' AS value, count(*) AS n, "  # noqa: S608  (as above)
                            f"row_number() OVER (PARTITION BY e.key ORDER BY count(*) DESC, e.value #>> '{{}}') AS rank "
                            f"FROM ({docs_sql}) d CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(d.metadata) = 'object' "
                            f"THEN d.metadata ELSE '{{}}'::jsonb END) e "
                            f"WHERE e.key = ANY(%s) AND jsonb_typeof(e.value) = 'string' GROUP BY e.key, e.value) x "
                            f"WHERE rank <= %s ORDER BY key, rank", [*docs_params, keys, max_values])
                for key, value, n in cur.fetchall():
                    enumerations[key][value] = int(n)
        span = documents.filter(dated_at__isnull=False).aggregate(earliest=Min("dated_at"), latest=Max("dated_at"))
    dates = None
    if span["earliest"] is not None:
        dates = {"key": date_keys[0] if len(date_keys) == 1 else "dated_at",
                 "earliest": span["earliest"].isoformat(), "latest": span["latest"].isoformat()}
    taken = {*enumerations, *date_keys}
    return {"enumerations": enumerations, "dates": dates,
            "other_keys": sorted(k for k in stats if k not in taken)[:max_values]}
