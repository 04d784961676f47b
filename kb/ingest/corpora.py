"""What a corpus declares about its documents, checked and kept true: its date key (Document.dated_at
follows it), its facet keys and its text search language (its chunks' tsvectors follow it).

The API and the admin both call `check_declarations` before saving and `save_corpus` to save, so a
changed date key or language is applied to the stored documents and chunks in the same transaction.
Recomputing is one UPDATE per table over the corpus's rows (a large corpus takes a while; searches
see the old values until it commits).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connections

from kb import access
from kb.ingest.dates import DATED_AT_SQL, dated_at_params
from kb.metadata import text_problem
from kb.models import Corpus, Document
from tenants.scope import Scope, activate

MAX_FACET_KEYS = 50
MAX_KEY_CHARS = 100


class DeclarationRejected(ValueError):
    """A corpus declaration that cannot be used; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def text_search_languages(using: str = "default") -> list[str]:
    """The PostgreSQL text search configurations a corpus may name (pg_catalog.pg_ts_config)."""
    with connections[using].cursor() as cur:
        cur.execute("SELECT cfgname FROM pg_catalog.pg_ts_config ORDER BY cfgname")
        return [r[0] for r in cur.fetchall()]


def _key_problem(key: object) -> str | None:
    if not isinstance(key, str) or not key.strip():
        return "must be a non-empty string"
    if len(key) > MAX_KEY_CHARS:
        return f"must be at most {MAX_KEY_CHARS} characters"
    return text_problem(key)


def check_declarations(*, date_key: object = None, facet_keys: object = None, language: object = None) -> dict:
    """The given declarations, cleaned (None: not given); raises DeclarationRejected(field, message)."""
    out: dict = {}
    if date_key is not None:
        key = date_key.strip() if isinstance(date_key, str) else date_key
        if key != "" and (problem := _key_problem(key)):
            raise DeclarationRejected("date_key", problem)
        out["date_key"] = key
    if facet_keys is not None:
        if not isinstance(facet_keys, list):
            raise DeclarationRejected("facet_keys", 'must be a list of metadata keys, e.g. ["source", "category"]')
        if len(facet_keys) > MAX_FACET_KEYS:
            raise DeclarationRejected("facet_keys", f"at most {MAX_FACET_KEYS} keys")
        for key in facet_keys:
            if problem := _key_problem(key):
                raise DeclarationRejected("facet_keys", f"{key!r}: {problem}")
        out["facet_keys"] = list(dict.fromkeys(k.strip() for k in facet_keys))
    if language is not None:
        known = text_search_languages()
        if not isinstance(language, str) or language not in known:
            raise DeclarationRejected("language", f"{language!r} is not a PostgreSQL text search configuration; "
                                                  f"one of: {', '.join(known)}")
        out["language"] = language
    return out


def save_corpus(*, scope: Scope, corpus: Corpus, changed: Iterable[str] = ()) -> Corpus:
    """Save an existing corpus whose fields were set (already checked: `check_declarations`). A date key
    or language that differs from the stored one recomputes its documents' dates or its chunks'
    keyword index, in the same transaction. `changed` (the fields set) is informational: what
    differs from the stored row decides."""
    access.check_may_change(scope, corpus, "corpus")
    with activate(scope):
        stored = Corpus.objects.for_scope(scope).filter(pk=corpus.pk).values("date_key", "language").first()
        redate = stored is not None and stored["date_key"] != corpus.date_key
        reindex = stored is not None and stored["language"] != corpus.language
        if redate or reindex:
            # Ingestion writes a document's chunks holding the document, then the corpus (which it
            # reads the language from): locked in that order here too, so the two never deadlock.
            list(Document.objects.for_scope(scope).filter(corpus_id=corpus.pk).order_by("pk").select_for_update()
                 .values_list("pk", flat=True))
        Corpus.objects.for_scope(scope).select_for_update().filter(pk=corpus.pk).first()
        corpus.save()
        if redate:
            refresh_dated_at(scope=scope, corpus=corpus)
        if reindex:
            refresh_search_vectors(scope=scope, corpus=corpus)
    return corpus


def refresh_dated_at(*, scope: Scope, corpus: Corpus) -> int:
    """Recompute Document.dated_at of the corpus's documents from its date key (kb.ingest.dates), in one
    UPDATE; returns the documents updated. Runs inside activate(scope) (opens it otherwise)."""
    with activate(scope), connections["default"].cursor() as cur:
        if corpus.date_key:
            cur.execute(f"UPDATE kb_document d SET dated_at = {DATED_AT_SQL} "  # noqa: S608  (DATED_AT_SQL: a fixed fragment with named parameters)
                        "WHERE d.tenant_id = %(tenant)s AND d.corpus_id = %(corpus)s",
                        {**dated_at_params(corpus.date_key), "tenant": scope.tenant_id, "corpus": corpus.pk})
        else:
            cur.execute("UPDATE kb_document d SET dated_at = NULL WHERE d.tenant_id = %s AND d.corpus_id = %s "
                        "AND d.dated_at IS NOT NULL", [scope.tenant_id, corpus.pk])
        return cur.rowcount


def refresh_search_vectors(*, scope: Scope, corpus: Corpus) -> int:
    """Recompute the corpus's chunk tsvectors (and stored sentence lexemes) under its language, as
    ingestion computes them (kb.ingest.pipeline); returns the chunks updated."""
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute("UPDATE kb_chunk c SET search_vector = to_tsvector(%(lang)s::regconfig, d.title || ' ' || c.locator "
                    "|| ' ' || c.text) FROM kb_document d WHERE d.id = c.document_id AND d.tenant_id = c.tenant_id "
                    "AND c.tenant_id = %(tenant)s "
                    "AND c.corpus_id = %(corpus)s",
                    {"lang": corpus.language, "tenant": scope.tenant_id, "corpus": corpus.pk})
        chunks = cur.rowcount
        cur.execute("UPDATE kb_chunksentence s SET lexemes = tsvector_to_array(to_tsvector(%(lang)s::regconfig, "
                    "substr(c.text, s.char_start + 1, s.char_end - s.char_start))) FROM kb_chunk c "
                    "WHERE c.id = s.chunk_id AND s.tenant_id = %(tenant)s AND c.tenant_id = %(tenant)s "
                    "AND c.corpus_id = %(corpus)s",
                    {"lang": corpus.language, "tenant": scope.tenant_id, "corpus": corpus.pk})
        return chunks
