"""What an answer rests on: its citations, checked against the chunks the run retrieved, and the
evidence (the retrieved text, kept for audit) they stay viewable by.

Citations (pure: no ORM, works on the chunks a run retrieved). Answers cite inline as [c:123] (or
[c:123, c:456]). A double-quoted passage right before a marker is a quotation from that chunk:
"Hotel stays up to EUR 180 per night." [c:123]. Each citation is checked against the chunks
retrieved in THIS run only; an id from anywhere else (another run, another tenant, the model's
imagination) is `not_retrieved`.

Evidence retention (the database: `keep`, `for_citations`, `purge`). A document re-uploaded with
changes gets new chunks (its version goes up) and a deleted document's chunks go; a run's citations
must stay fully viewable all the same. So a run is stored with the chunks it retrieved as `Evidence`
(text, document id and version, title, locator, department), once per (chunk, content) per tenant.
Evidence is append-only for the application role and is removed only by `purge`, which keeps
whatever a run created within the retention period references. Retention:
`Tenant.settings["evidence_retention_days"]`, else product_settings.EVIDENCE_RETENTION_DAYS.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections
from django.utils import timezone

from agents.lexical import coverage, normalise, terms
from agents.models import Evidence
from kb.models import Document
from tenants import tenant_settings
from tenants.models import Tenant
from tenants.scope import Scope

MARKER = re.compile(r"\[\s*c:\s*\d+(?:\s*[,;]\s*(?:c:)?\s*\d+)*\s*\]", re.IGNORECASE)
_IDS = re.compile(r"\d+")
_QUOTE_BEFORE = re.compile(r"[\"“]([^\"“”]{3,}?)[\"”]\s*[,.;:]?\s*$")
MIN_SUPPORT = 0.2  # share of a claim's terms that must appear in the cited chunk when nothing is quoted

NOT_ENOUGH_EVIDENCE = "NOT_ENOUGH_EVIDENCE"


@dataclass(frozen=True)
class RetrievedChunk:
    chunk_id: int
    document_id: int
    content_hash: str
    text: str
    title: str = ""
    locator: str = ""
    corpus_name: str = ""
    score: float = 0.0
    flags: tuple[str, ...] = ()
    metadata: Mapping | None = None


@dataclass(frozen=True, slots=True)
class CitationCheck:
    ordinal: int
    chunk_id: int
    quoted_text: str
    claim: str
    verdict: str  # agents.models.Verdict values
    reason: str
    document_id: int | None = None
    content_hash: str = ""

    @property
    def verified(self) -> bool:
        return self.verdict == "verified"

    def as_dict(self) -> dict:
        return {"chunk_id": self.chunk_id, "quoted_text": self.quoted_text, "claim": self.claim,
                "verdict": self.verdict, "reason": self.reason}


def neutralise_markers(text: str) -> str:
    """A document's own citation markers made inert: "[c:31]" becomes "(c 31)".

    Everything a model is shown of a document passes through this (agents.prompts.chunk_block and the
    code-built context), and quotes are checked against the same form, so a marker planted in a
    document can neither be copied into an answer as a citation nor break a quote of its sentence."""
    return MARKER.sub(lambda m: "(" + re.sub(r"(?i)c:\s*", "c ", m.group(0)[1:-1].strip()) + ")", text)


def check_citations(answer: str, retrieved: Mapping[int, RetrievedChunk]) -> list[CitationCheck]:
    """Every citation in `answer`, in order, with its verdict."""
    checks: list[CitationCheck] = []
    for m in MARKER.finditer(answer):
        before = answer[: m.start()]
        quote_match = _QUOTE_BEFORE.search(before)
        quote = quote_match.group(1).strip() if quote_match else ""
        claim = _claim_before(before)
        for raw_id in _IDS.findall(m.group(0)):
            checks.append(_check_one(len(checks), int(raw_id), quote, claim, retrieved))
    return checks


def _claim_before(before: str) -> str:
    text = MARKER.sub("", before[-600:])
    pieces = re.split(r"(?<=[.!?])\s+(?=\S)|\n", text.rstrip())
    last = pieces[-1] if pieces else ""
    if len(terms(last)) < 2 and len(pieces) > 1:  # marker placed after the sentence's full stop
        last = pieces[-2] + " " + last
    return last.strip(" -*\t")[:500]


def _check_one(ordinal: int, chunk_id: int, quote: str, claim: str, retrieved: Mapping[int, RetrievedChunk]) -> CitationCheck:
    chunk = retrieved.get(chunk_id)
    if chunk is None:
        return CitationCheck(ordinal, chunk_id, quote, claim, "not_retrieved", "this chunk was not retrieved in this run")

    def check(verdict: str, reason: str) -> CitationCheck:
        return CitationCheck(ordinal, chunk_id, quote, claim, verdict, reason, chunk.document_id, chunk.content_hash)

    if quote:
        found = quote_in(normalise(quote), normalise(neutralise_markers(chunk.text)))
        if found == "whole":
            return check("verified", "quoted text occurs in the chunk")
        if found == "cut":
            return check("quote_mismatch", "quoted text occurs in the chunk only as part of a longer word or "
                                           "figure (it starts or ends inside one, e.g. 'EUR 4.' of 'EUR 4.50')")
        return check("quote_mismatch", "quoted text does not occur in the cited chunk")
    claim_terms = terms(claim)
    if len(claim_terms) >= 3:
        support = coverage(claim_terms, terms(chunk.text))
        if support < MIN_SUPPORT:
            return check("unsupported", f"only {support:.0%} of the claim's terms occur in the chunk")
    return check("verified", "chunk retrieved in this run and supports the claim")


# Characters that join two letters or digits into one token when nothing separates them from either:
# "4.50", "1,000", "10:30", "a/b", "ops@corp", "state-of-the-art", "don't".
_JOINERS = frozenset(".,:/@-_'&+=?#%~")
# Scripts written without spaces between words: a character of theirs next to another is no token cut.
_UNSPACED = re.compile(r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def quote_in(quote: str, source: str) -> str:
    """Where `quote` occurs in `source` (both `normalise`d): "whole" when some occurrence starts and
    ends at token boundaries of the source, "cut" when every occurrence starts or ends inside a token
    (a word or figure the quote cuts: "eur 4." in "eur 4.50 per day"), "" when it does not occur."""
    if not quote:
        return "whole"
    found = ""
    at = source.find(quote)
    while at >= 0:
        if not _joined(source, at) and not _joined(source, at + len(quote)):
            return "whole"
        found = "cut"
        at = source.find(quote, at + 1)
    return found


def _joined(text: str, i: int) -> bool:
    """Whether position `i` (between text[i-1] and text[i]) lies inside a token of `text`."""
    if i <= 0 or i >= len(text):
        return False
    left, right = text[i - 1], text[i]

    def word(ch: str) -> bool:
        return ch.isalnum() and not _UNSPACED.match(ch)

    if word(left) and word(right):
        return True
    if word(left) and right in _JOINERS:  # "4" | ".50"
        return i + 1 < len(text) and word(text[i + 1])
    if left in _JOINERS and word(right):  # "4." | "50"
        return i >= 2 and word(text[i - 2])
    return False


def is_not_enough_evidence(answer: str) -> bool:
    head = answer.strip().lstrip("*#> ").upper().replace(" ", "_")
    return head.startswith(NOT_ENOUGH_EVIDENCE)


def grounding_report(answer: str, retrieved: Mapping[int, RetrievedChunk]) -> dict:
    """What the check_grounding tool returns: per-citation verdicts and an overall flag."""
    checks = check_citations(answer, retrieved)
    return {
        "citations": [c.as_dict() for c in checks],
        "all_verified": bool(checks) and all(c.verified for c in checks),
        "uncited": not checks,
        "hint": "Cite only chunk ids returned by search/read in this conversation; quote text exactly as it appears.",
    }


# Evidence retention (see the module docstring).


def keep(scope: Scope, chunks: Iterable[RetrievedChunk], seen_at: datetime) -> None:
    """Store the retrieved `chunks` as evidence (already kept ones are left as they are). Inside activate(scope),
    in the transaction that stores the run."""
    chunks = list(chunks)
    if not chunks:
        return
    documents = {d["id"]: d for d in Document.objects.for_scope(scope).filter(id__in={c.document_id for c in chunks})
                 .values("id", "version", "department_id")}
    rows = [Evidence(tenant_id=scope.tenant_id, department_id=documents[c.document_id]["department_id"], chunk_id=c.chunk_id,
                     content_hash=c.content_hash, document_id=c.document_id, document_version=documents[c.document_id]["version"],
                     document_title=c.title[:500], locator=c.locator[:1000], text=c.text.replace("\x00", ""), first_seen_at=seen_at)
            for c in chunks if c.document_id in documents]
    Evidence.objects.bulk_create(rows, ignore_conflicts=True)


@dataclass(frozen=True)
class CitedEvidence:
    """A citation's evidence as an auditor reads it: the text as retrieved, the version it came from, and
    whether the document has changed since (a newer version, or deleted)."""

    text: str
    document_id: int
    document_version: int
    document_title: str
    locator: str
    document_now: str  # "unchanged" | "changed (now version N)" | "deleted"

    @property
    def changed_since(self) -> bool:
        return self.document_now != "unchanged"

    def as_dict(self) -> dict:
        return {"text": self.text, "document_id": self.document_id, "document_version": self.document_version,
                "document_title": self.document_title, "locator": self.locator, "document_now": self.document_now,
                "changed_since": self.changed_since}


def for_citations(scope: Scope, pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], CitedEvidence]:
    """Evidence visible to `scope` for (chunk id, content hash) pairs, with what became of each document. Inside activate(scope)."""
    pairs = {(int(c), h) for c, h in pairs if h}
    if not pairs:
        return {}
    rows = Evidence.objects.for_scope(scope).filter(chunk_id__in={c for c, _ in pairs})
    found = [e for e in rows if (e.chunk_id, e.content_hash) in pairs]
    now = dict(Document.objects.for_scope(scope).filter(id__in={e.document_id for e in found}).values_list("id", "version"))
    out = {}
    for e in found:
        version = now.get(e.document_id)
        state = "deleted" if version is None else "unchanged" if version == e.document_version else f"changed (now version {version})"
        out[(e.chunk_id, e.content_hash)] = CitedEvidence(e.text, e.document_id, e.document_version, e.document_title, e.locator, state)
    return out


def retention_days(tenant: Tenant) -> int:
    """The tenant's `evidence_retention_days` (read by tenants.tenant_settings), else EVIDENCE_RETENTION_DAYS."""
    return tenant_settings.read(tenant.settings).evidence_retention_days


@dataclass(frozen=True)
class PurgeResult:
    removed: int
    kept: int  # rows asked for that a run within retention references
    retention_days: int


def purge(tenant: Tenant, *, document_id: int | None = None, now: datetime | None = None, using: str = "owner") -> PurgeResult:
    """Remove the tenant's evidence (or one document's) that no run created within retention retrieved or
    cited; keep and count the rest. Runs as the owner (the application role may not delete evidence)."""
    days = retention_days(tenant)
    since = (now or timezone.now()) - timedelta(days=days)
    referenced = """EXISTS (SELECT 1 FROM agents_runstep s JOIN agents_run r ON r.id = s.run_id AND r.tenant_id = s.tenant_id
                            WHERE r.tenant_id = e.tenant_id AND r.created_at >= %(since)s AND s.content_hashes ? e.content_hash
                              AND s.chunk_ids @> to_jsonb(e.chunk_id))
                    OR EXISTS (SELECT 1 FROM agents_citation c JOIN agents_run r ON r.id = c.run_id AND r.tenant_id = c.tenant_id
                               WHERE r.tenant_id = e.tenant_id AND r.created_at >= %(since)s
                                 AND c.chunk_id = e.chunk_id AND c.content_hash = e.content_hash)"""
    where = "e.tenant_id = %(tenant)s" + (" AND e.document_id = %(document)s" if document_id is not None else "")
    params = {"tenant": tenant.id, "document": document_id, "since": since}
    with connections[using].cursor() as cur:
        cur.execute(f"DELETE FROM agents_evidence e WHERE {where} AND NOT ({referenced})", params)  # noqa: S608  (where: fixed predicates; values are parameters)
        removed = cur.rowcount
        cur.execute(f"SELECT count(*) FROM agents_evidence e WHERE {where}", params)  # noqa: S608  (as above)
        kept = cur.fetchone()[0]
    return PurgeResult(removed, kept, days)
