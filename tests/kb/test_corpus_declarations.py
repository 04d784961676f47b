"""What a corpus declares: its date key (Document.dated_at and the date filter), its text search language
(ingestion, keyword search, recomputation) and the checks on both, through kb and through the API."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import connections
from rest_framework.test import APIClient

from kb.ingest import run_ingest_job, upload_document
from kb.ingest.corpora import DeclarationRejected, check_declarations, save_corpus
from kb.ingest.dates import DATED_AT_SQL, dated_at_params, parse_date
from kb.models import Chunk, Corpus, Document
from kb.retrieval import SearchFilters, search
from tenants.models import ApiKey
from tenants.scope import activate
from tests.factories import whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def new_corpus(tenant, name="Policies", **declared) -> Corpus:
    with activate(whole_tenant(tenant)):
        return Corpus.objects.create(tenant=tenant, name=name, embedding_model="hash", embedding_dim=64, **declared)


def upload(corpus: Corpus, name: str, text: str, metadata: dict | None = None, ingest: bool = True) -> Document:
    document, job = upload_document(scope=whole_tenant(corpus.tenant), corpus=corpus, filename=f"{name}.md",
                                    data=f"# {name}\n\n{text}\n".encode(), metadata=metadata, title=name)
    if ingest and job is not None:
        run_ingest_job(job_id=job.id, tenant_id=corpus.tenant_id)
    return document


def dated(corpus: Corpus) -> dict[str, datetime | None]:
    with activate(whole_tenant(corpus.tenant)):
        return dict(Document.objects.for_scope(whole_tenant(corpus.tenant)).filter(corpus=corpus)
                    .values_list("title", "dated_at"))


def reload(corpus: Corpus) -> Corpus:
    with activate(whole_tenant(corpus.tenant)):
        return Corpus.objects.for_scope(whole_tenant(corpus.tenant)).get(pk=corpus.pk)


VALUES = ["2025-03-01", "2025-03-01T10:30:00+02:00", "2025-03-01T10:30:00Z", "2025-03-01 10:30", "2025-03-01T10:30:00.25",
          "2025-02-30", "March 1st", "01/03/2025", "2025", " 2025-03-01", "2025-03-01T10:30:00-0500"]


def test_python_and_sql_read_the_same_dates(tenant):
    """Upload (Python) and recomputation (one UPDATE) must agree on every value."""
    with activate(whole_tenant(tenant)), connections["default"].cursor() as cur:
        for value in [*VALUES, 2025, None, ["2025-03-01"]]:
            cur.execute(f"SELECT {DATED_AT_SQL} FROM (SELECT %(meta)s::jsonb AS metadata) d",
                        {**dated_at_params("when"), "meta": json.dumps({"when": value})})
            assert cur.fetchone()[0] == parse_date(value), value
    assert parse_date("2025-03-01") == datetime(2025, 3, 1, tzinfo=UTC)
    assert parse_date("2025-03-01T10:30:00+02:00") == datetime(2025, 3, 1, 8, 30, tzinfo=UTC)
    assert parse_date("2025-02-30") is None and parse_date("March 1st") is None and parse_date(2025) is None


def test_dated_at_follows_the_date_key_at_upload_and_when_the_key_changes(tenant):
    corpus = new_corpus(tenant, date_key="effective_date")
    meta = {"effective_date": "2024-05-01", "reviewed": "2025-01-15"}
    upload(corpus, "Travel", "Hotels up to 150 EUR.", meta, ingest=False)
    upload(corpus, "Leave", "Twenty days of leave.", {"effective_date": "soon", "reviewed": "2025-02-01"}, ingest=False)
    upload(corpus, "Undated", "No dates here.", ingest=False)
    assert dated(corpus) == {"Travel": datetime(2024, 5, 1, tzinfo=UTC), "Leave": None, "Undated": None}
    # The same bytes with new metadata: the date follows.
    upload(corpus, "Leave", "Twenty days of leave.", {"effective_date": "2023-01-01"}, ingest=False)
    assert dated(corpus)["Leave"] == datetime(2023, 1, 1, tzinfo=UTC)
    # Another key: every document recomputed, in the same call.
    corpus.date_key = "reviewed"
    save_corpus(scope=whole_tenant(tenant), corpus=corpus, changed=["date_key"])
    assert dated(corpus) == {"Travel": datetime(2025, 1, 15, tzinfo=UTC), "Leave": None, "Undated": None}
    corpus.date_key = ""
    save_corpus(scope=whole_tenant(tenant), corpus=corpus, changed=["date_key"])
    assert set(dated(corpus).values()) == {None}


def test_date_filter_through_search(tenant):
    corpus = new_corpus(tenant, date_key="effective_date")
    old = upload(corpus, "Old travel", "Travel expenses rules of the old policy.", {"effective_date": "2022-06-01"})
    new = upload(corpus, "New travel", "Travel expenses rules of the new policy.", {"effective_date": "2024-06-01T12:00:00Z"})
    upload(corpus, "Undated travel", "Travel expenses rules without a date.")
    scope = whole_tenant(tenant)

    def docs(**window) -> set[int]:
        result = search(scope, "travel expenses", k=10, mode="hybrid", filters=SearchFilters(**window))
        return {h.document_id for h in result.hits}

    assert docs(date_after="2023-01-01") == {new.id}
    assert docs(date_before="2023-01-01") == {old.id}
    assert docs(date_after="2022-06-01", date_before="2024-06-01T12:00:00Z") == {old.id}  # after inclusive, before exclusive
    assert docs(date_after="2030-01-01") == set()
    applied = search(scope, "travel", filters=SearchFilters(date_after="2023-01-01")).applied_filter
    assert applied["date_after"] == "2023-01-01" and applied["date_before"] is None


def test_french_corpus_matches_inflected_words_and_english_does_not(tenant):
    fr = new_corpus(tenant, "Politique", language="french")
    en = new_corpus(tenant, "Policy")
    upload(fr, "Congé", "Chaque salarié a droit à un congé annuel de vingt-cinq jours.")
    upload(en, "Leave", "Chaque salarié a droit à un congé annuel de vingt-cinq jours.")
    scope = whole_tenant(tenant)

    def found(corpus: Corpus, query: str) -> list[int]:
        return [h.corpus_id for h in search(scope, query, k=5, mode="keyword",
                                            filters=SearchFilters(corpus_ids=(corpus.id,))).hits]

    assert found(fr, "congés") == [fr.id]  # the French stemmer folds plural and accent
    assert found(fr, "annuelle") == [fr.id]  # and gender
    assert found(en, "annuelle") == []  # English keeps "annuelle" apart from "annuel"
    # Both languages in one scope: each corpus is matched under its own.
    assert [h.corpus_id for h in search(scope, "annuelle", k=5, mode="keyword").hits] == [fr.id]
    both = search(scope, "congé annuel", k=5, mode="hybrid")
    assert {h.corpus_id for h in both.hits} == {fr.id, en.id} and "english: bm25" in both.path and "french: bm25" in both.path


def test_changing_the_language_recomputes_the_keyword_index(tenant):
    corpus = new_corpus(tenant, "Politique")
    upload(corpus, "Congé", "Chaque salarié a droit à un congé annuel.")
    scope = whole_tenant(tenant)
    assert search(scope, "annuelle", k=5, mode="keyword").hits == []
    corpus.language = "french"
    save_corpus(scope=scope, corpus=corpus, changed=["language"])
    assert [h.corpus_id for h in search(scope, "annuelle", k=5, mode="keyword").hits] == [corpus.id]
    with activate(scope), connections["default"].cursor() as cur:
        cur.execute("SELECT count(*) FROM kb_chunk WHERE tenant_id = %s AND corpus_id = %s "
                    "AND search_vector @@ to_tsquery('french', 'conges')", [scope.tenant_id, corpus.id])
        assert cur.fetchone()[0] == Chunk.objects.for_scope(scope).filter(corpus=corpus).count() > 0


def test_declarations_are_checked():
    assert check_declarations(language="french", date_key=" effective_date ", facet_keys=["source", "source", "team"]) == \
        {"language": "french", "date_key": "effective_date", "facet_keys": ["source", "team"]}
    for given, field in [({"language": "klingon"}, "language"), ({"language": ""}, "language"),
                         ({"facet_keys": "source"}, "facet_keys"), ({"facet_keys": ["ok", ""]}, "facet_keys"),
                         ({"facet_keys": [1]}, "facet_keys"), ({"date_key": "x" * 101}, "date_key")]:
        with pytest.raises(DeclarationRejected) as caught:
            check_declarations(**given)
        assert caught.value.field == field


# --- through the API ------------------------------------------------------------------------------

@pytest.fixture
def admin_client(tenant):
    _, raw = ApiKey.issue(tenant=tenant, name="admin key", role="admin", all_departments=True, departments=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture(autouse=True)
def _fresh_limits(settings):
    from django.core.cache import cache

    settings.RATE_LIMIT_REDIS_URL = ""
    cache.clear()


def test_api_declares_and_validates(tenant, admin_client):
    r = admin_client.post("/api/v1/corpora/", {"name": "Handbuch", "embedding_model": "hash", "embedding_dim": 64,
                                               "language": "german", "date_key": "gueltig_ab", "facet_keys": ["abteilung"]},
                          format="json")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert (body["language"], body["date_key"], body["facet_keys"]) == ("german", "gueltig_ab", ["abteilung"])
    for bad, field in [({"language": "klingon"}, "language"), ({"facet_keys": "abteilung"}, "facet_keys"),
                       ({"facet_keys": [""]}, "facet_keys[0]"), ({"facet_keys": None}, "facet_keys"),
                       ({"date_key": "x" * 101}, "date_key")]:
        r = admin_client.patch(f"/api/v1/corpora/{body['id']}/", bad, format="json")
        assert r.status_code == 400 and any(f.startswith(field) for f in r.json()["error"]["fields"]), r.json()
    r = admin_client.post("/api/v1/corpora/", {"name": "Other", "language": "nope"}, format="json")
    assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["language"]
    assert reload(Corpus(pk=body["id"], tenant=tenant)).language == "german"


def test_api_date_key_change_and_date_filter(tenant, admin_client):
    corpus = new_corpus(tenant)
    old = upload(corpus, "Old travel", "Travel expenses rules of the old policy.", {"valid_from": "2022-06-01"})
    new = upload(corpus, "New travel", "Travel expenses rules of the new policy.", {"valid_from": "2024-06-01"})

    def searched(filters: dict) -> set[int]:
        r = admin_client.post("/api/v1/search/", {"query": "travel expenses", "filters": filters}, format="json")
        assert r.status_code == 200, r.json()
        return {h["document_id"] for h in r.json()["hits"]}

    assert searched({"date_after": "2023-01-01"}) == set()  # no date key yet: undated
    r = admin_client.patch(f"/api/v1/corpora/{corpus.id}/", {"date_key": "valid_from"}, format="json")
    assert r.status_code == 200 and r.json()["date_key"] == "valid_from"
    assert searched({"date_after": "2023-01-01"}) == {new.id}
    assert searched({"date_before": "2023-01-01T00:00:00Z"}) == {old.id}
    r = admin_client.get(f"/api/v1/documents/{new.id}/")
    assert r.json()["dated_at"].startswith("2024-06-01")


def test_sentence_lexemes_follow_the_language(tenant):
    """The sentence re-rank's lexemes are computed under the corpus's language too, and recomputed with it."""
    from kb.models import ChunkSentence

    corpus = new_corpus(tenant, "Politique", language="french", sentence_vectors=True)
    upload(corpus, "Congé", "Chaque salarié a droit à un congé annuel. Les congés se posent en avance.")
    scope = whole_tenant(tenant)

    def lexemes() -> set[str]:
        with activate(scope):
            return {lex for row in ChunkSentence.objects.for_scope(scope).values_list("lexemes", flat=True) for lex in row}

    assert "cong" in lexemes() and "congé" not in lexemes()
    corpus.language = "english"
    save_corpus(scope=scope, corpus=corpus, changed=["language"])
    assert "congé" in lexemes() and "cong" not in lexemes()
