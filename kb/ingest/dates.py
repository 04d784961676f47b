"""A document's date: `metadata[corpus.date_key]` read as an ISO 8601 date or date-time (no ORM).

One rule, twice: `document_date` in Python (upload, admin edits) and `DATED_AT_SQL` in PostgreSQL (a
corpus's documents recomputed in one UPDATE when its date key changes). Anything else, a number,
"last week", "12/10/2023", an impossible day, gives no date (null). A date-time without an offset is
UTC; a date alone is its midnight UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

# The ISO forms both sides accept; an offset only after a time.
ISO_DATE = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}(:?\d{2})?)?)?$"
_ISO = re.compile(ISO_DATE)
_OFFSET = r"\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}(:?\d{2})?)$"

# %(key)s: the metadata key; evaluated on a kb_document row named d.
DATED_AT_SQL = (
    "CASE WHEN d.metadata->>%(key)s ~ %(iso)s AND pg_input_is_valid(d.metadata->>%(key)s, 'timestamp') THEN "
    "CASE WHEN d.metadata->>%(key)s ~ %(offset)s THEN (d.metadata->>%(key)s)::timestamptz "
    "ELSE (d.metadata->>%(key)s)::timestamp AT TIME ZONE 'UTC' END END")


def dated_at_params(key: str) -> dict:
    """The parameters of DATED_AT_SQL for metadata key `key`."""
    return {"key": key, "iso": ISO_DATE, "offset": _OFFSET}


def parse_date(value: object) -> datetime | None:
    """`value` as an aware datetime if it is an ISO date or date-time string, else None."""
    if not isinstance(value, str) or not _ISO.match(value):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def document_date(metadata: dict | None, date_key: str) -> datetime | None:
    """The date a document's metadata gives under its corpus's date key (None: no key, no date)."""
    if not date_key or not isinstance(metadata, dict):
        return None
    return parse_date(metadata.get(date_key))
