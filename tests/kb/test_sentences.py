"""Sentence vectors: split, written with their chunks, gone with them, and the search re-rank they feed."""

from __future__ import annotations

import pytest
from django.db import connections

from kb.ingest import upload_document
from kb.models import Chunk, ChunkSentence, Corpus, Document
from kb.retrieval import search
from kb.sentences import fuse, sentence_spans
from tenants.scope import activate
from tests.factories import as_stored, make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def test_sentence_spans_split_at_sentence_ends_and_lines():
    text = "The board met on Monday. It approved the budget!\nShort. “Quoted speech ends here.” Next one follows"
    pieces = [text[s:e] for s, e in sentence_spans(text)]
    assert pieces == ["The board met on Monday.", "It approved the budget!", "“Quoted speech ends here.”",
                      "Next one follows"]  # "Short." is below the minimum and gets no vector
    assert sentence_spans("tiny") == [(0, 4)]  # nothing long enough: the whole text
    assert sentence_spans("   ") == []


def test_fuse_promotes_by_sentences_and_leaves_unscored_candidates_in_place():
    # b leads the candidates but has the worst sentences; a has the best.
    assert fuse([1, 2, 3, 4], {1: 0.1, 2: 0.9, 3: 0.5, 4: 0.4}, rrf_k=60)[:2] == [2, 1]
    # Candidates without sentence vectors (5) keep their rank on both sides.
    assert fuse([5, 1, 3, 4, 2], {1: 0.1, 3: 0.5, 4: 0.4, 2: 0.9}, rrf_k=60)[0] == 5
    assert fuse([7, 8], {}, rrf_k=60) == [7, 8]


def test_fuse_adds_the_term_order_and_ties_keep_the_candidates_order():
    by_vector = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6}
    assert fuse([1, 2, 3, 4], by_vector, rrf_k=60) == [1, 2, 3, 4]
    # 4 holds the query's terms in one sentence, the others none (tied at 0: their own order).
    assert fuse([1, 2, 3, 4], by_vector, {1: 0.0, 2: 0.0, 3: 0.0, 4: 5.0}, rrf_k=60) == [1, 2, 4, 3]
    assert fuse([1, 2, 3, 4], {}, {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}, rrf_k=60) == [1, 2, 3, 4]


@pytest.fixture
def upload(scope, django_capture_on_commit_callbacks):
    def do(corpus, filename, text):
        with django_capture_on_commit_callbacks(execute=True):
            document, _ = upload_document(scope=scope, corpus=corpus, filename=filename, data=text.encode())
        with activate(scope):
            return Document.objects.for_scope(scope).get(pk=document.pk)
    return do


def make_corpus(tenant, scope, name: str, sentence_vectors: bool) -> Corpus:
    with activate(scope):
        return Corpus.objects.create(tenant=tenant, name=name, embedding_model="hash", embedding_dim=256,
                                     chunk_target_tokens=400, chunk_overlap_tokens=0, sentence_vectors=sentence_vectors)


NOISE = ("Volunteers counted gulls and terns along the northern shore every morning. "
         "The visitor centre sells maps, field guides and hot drinks to walkers. "
         "Parking fees rose last spring after the council reviewed its budget. ")
DOCS = {
    # Every query word, often, each beside other words: the best keyword match, the worst sentences.
    "b.txt": "Heron tours cross the reserve daily with trained guides. Marsh paths flood after heavy rain in the winter "
             "months. Nesting boxes were repaired by the trust volunteers last year. Season tickets cost less for members "
             "of the trust this year. Heron photographers often wait patiently by the northern hide. Marsh frogs call "
             "loudly through the long warm summer evenings.",
    # The one sentence that says exactly what is asked, inside a longer text.
    "a.txt": NOISE + "Heron marsh nesting season. " + NOISE,
    "c.txt": "The marsh nesting area is closed. " + NOISE,
    "d.txt": "Heron season starts early. " + NOISE,
}
QUERY = "heron marsh nesting season"


def test_sentences_are_written_with_chunks_replaced_and_deleted_with_them(tenant, scope, upload):
    corpus = make_corpus(tenant, scope, "Reserve", sentence_vectors=True)
    plain = make_corpus(tenant, scope, "Plain", sentence_vectors=False)
    d = upload(corpus, "a.txt", DOCS["a.txt"])
    upload(plain, "a.txt", DOCS["a.txt"])
    with activate(scope):
        chunk = Chunk.objects.for_scope(scope).get(document=d)
        rows = list(ChunkSentence.objects.for_scope(scope).filter(chunk=chunk).order_by("ordinal"))
        assert [chunk.text[r.char_start:r.char_end] for r in rows] == [chunk.text[s:e] for s, e in sentence_spans(chunk.text)]
        assert {r.embedding_model for r in rows} == {"hash:256"} and len(rows[0].embedding) == 256
    with connections["default"].cursor() as cur:  # each sentence's own lexemes, as the keyword side stems them
        for r in rows:
            cur.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [chunk.text[r.char_start:r.char_end]])
            assert r.lexemes == cur.fetchone()[0] and r.lexemes
    with activate(scope):
        assert ChunkSentence.objects.for_scope(scope).count() == len(rows)  # none for the corpus without them
    d = upload(corpus, "a.txt", "A different text now. It has two sentences only.")  # new bytes: chunks rewritten
    with activate(scope):
        assert ChunkSentence.objects.for_scope(scope).count() == 2
        Document.objects.for_scope(scope).filter(pk=d.pk).delete()
        assert ChunkSentence.objects.for_scope(scope).count() == 0
    with connections["owner"].cursor() as cur:  # not merely hidden by RLS: gone
        cur.execute("SELECT count(*) FROM kb_chunksentence WHERE tenant_id = %s", [tenant.pk])
        assert cur.fetchone()[0] == 0


@pytest.mark.tenantless_sql("adversarial: SQL with no tenant term sees no other tenant's sentences (RLS)")
def test_sentence_rows_are_invisible_to_another_tenant(tenant, scope, upload):
    upload(make_corpus(tenant, scope, "Reserve", sentence_vectors=True), "a.txt", DOCS["a.txt"])
    other = whole_tenant(make_tenant("Rivals"))
    with activate(other), connections["default"].cursor() as cur:
        assert ChunkSentence.objects.for_scope(other).count() == 0
        cur.execute("SELECT count(*) FROM kb_chunksentence")  # RLS, not just the manager
        assert cur.fetchone()[0] == 0


def test_rerank_promotes_the_chunk_whose_sentence_matches(tenant, scope, upload):
    corpus = make_corpus(tenant, scope, "Reserve", sentence_vectors=True)
    docs = {name: upload(corpus, name, text) for name, text in DOCS.items()}
    with activate(scope):
        plain = search(scope, QUERY, k=4, mode="hybrid")
        reranked = search(scope, QUERY, k=4, mode="hybrid", rerank=True)
    first = {d.pk: name for name, d in docs.items()}
    assert [first[h.document_id] for h in plain.hits][:2] == ["b.txt", "a.txt"]
    assert first[reranked.hits[0].document_id] == "a.txt"
    assert sorted(h.chunk_id for h in reranked.hits) == sorted(h.chunk_id for h in plain.hits)
    assert reranked.applied_filter["rerank"] is True and "sentence rerank" in reranked.path
    assert plain.applied_filter["rerank"] is False


def test_rerank_counts_the_query_terms_one_sentence_holds(tenant, scope, upload):
    corpus = make_corpus(tenant, scope, "Reserve", sentence_vectors=True)
    docs = {name: upload(corpus, name, text) for name, text in DOCS.items()}
    name_of = {d.pk: name for name, d in docs.items()}

    def order() -> list[str]:
        with activate(scope):
            return [name_of[h.document_id] for h in search(scope, QUERY, k=4, mode="hybrid", rerank=True).hits]

    with activate(scope):
        plain = [name_of[h.document_id] for h in search(scope, QUERY, k=4, mode="hybrid").hits]
    with activate(scope), connections["default"].cursor() as cur:  # every sentence one vector: the vector side ties
        cur.execute("UPDATE kb_chunksentence SET embedding = (SELECT embedding FROM kb_chunksentence WHERE tenant_id = %s "
                    "LIMIT 1) WHERE tenant_id = %s", [tenant.pk, tenant.pk])
    with_terms = order()
    with activate(scope), connections["default"].cursor() as cur:  # now a.txt's sentences lose their lexemes too
        cur.execute("UPDATE kb_chunksentence s SET lexemes = '{}' FROM kb_chunk c WHERE s.tenant_id = %s "
                    "AND c.id = s.chunk_id AND c.tenant_id = s.tenant_id AND c.document_id = %s",
                    [tenant.pk, docs["a.txt"].pk])
    without = order()
    # b.txt leads the hybrid order; a.txt's one sentence holding every query term lifts it above b.txt
    # by terms alone, and without its lexemes it falls back behind.
    assert plain[:2] == ["b.txt", "a.txt"]
    assert with_terms[0] == "a.txt", with_terms
    assert without.index("a.txt") > without.index("b.txt"), without


def test_rerank_is_a_no_op_without_sentence_vectors(tenant, scope, upload):
    corpus = make_corpus(tenant, scope, "Plain", sentence_vectors=False)
    for name, text in DOCS.items():
        upload(corpus, name, text)
    with activate(scope):
        plain = search(scope, QUERY, k=4, mode="hybrid")
        asked = search(scope, QUERY, k=4, mode="hybrid", rerank=True)
    assert [h.chunk_id for h in asked.hits] == [h.chunk_id for h in plain.hits]
    assert asked.applied_filter["rerank"] is False


def test_rerank_scores_sentences_against_the_rerank_query_when_given(tenant, scope, upload):
    corpus = make_corpus(tenant, scope, "Reserve", sentence_vectors=True)
    docs = {name: upload(corpus, name, text) for name, text in DOCS.items()}
    name_of = {d.pk: name for name, d in docs.items()}
    with activate(scope):
        by_query = search(scope, QUERY, k=4, mode="hybrid", rerank=True)
        by_other = search(scope, QUERY, k=4, mode="hybrid", rerank=True, rerank_query="the marsh nesting area is closed")
        blank = search(scope, QUERY, k=4, mode="hybrid", rerank=True, rerank_query="  ")
    order = [name_of[h.document_id] for h in by_query.hits]
    other = [name_of[h.document_id] for h in by_other.hits]
    assert order[0] == "a.txt" and order.index("c.txt") > order.index("d.txt")
    # Scored against another text, a.txt's matching sentence no longer lifts it, and c.txt (whose
    # sentence says exactly that text) moves above d.txt.
    assert other[0] != "a.txt" and other.index("c.txt") < other.index("d.txt")
    assert by_other.applied_filter["rerank_query"] == "the marsh nesting area is closed"
    assert [h.chunk_id for h in blank.hits] == [h.chunk_id for h in by_query.hits]
    assert "rerank_query" not in blank.applied_filter


def test_reembed_moves_the_sentences_with_their_chunks_and_the_rerank_keeps_working(tenant, scope, upload,
                                                                                     django_capture_on_commit_callbacks):
    from kb.embedding import HashEmbedder, embed_windowed
    from kb.ingest import run_reembed_job, start_reembed
    from kb.models import IngestJob

    corpus = make_corpus(tenant, scope, "Reserve", sentence_vectors=True)
    docs = {name: upload(corpus, name, text) for name, text in DOCS.items()}
    name_of = {d.pk: name for name, d in docs.items()}
    with django_capture_on_commit_callbacks(execute=False):
        job = start_reembed(scope=scope, corpus=corpus, model_key="hash:128")
    assert run_reembed_job(job_id=job.pk, tenant_id=scope.tenant_id) == "done"
    with activate(scope):
        rows = list(ChunkSentence.objects.for_scope(scope).select_related("chunk"))
        job = IngestJob.objects.for_scope(scope).get(pk=job.pk)
    assert rows and {r.embedding_model for r in rows} == {"hash:128"}
    for r in rows:
        text = r.chunk.text[r.char_start:r.char_end]
        assert list(r.embedding) == pytest.approx(as_stored(embed_windowed(HashEmbedder(128), [text], "document")[0]), rel=1e-6, abs=1e-9)
    assert (job.status, job.stage) == ("done", "done")
    # The re-rank scores sentences of the chunks' model only: it still promotes a.txt's sentence.
    with activate(scope):
        plain = [name_of[h.document_id] for h in search(scope, QUERY, k=4, mode="hybrid").hits]
        reranked = [name_of[h.document_id] for h in search(scope, QUERY, k=4, mode="hybrid", rerank=True).hits]
    assert plain[0] == "b.txt" and reranked[0] == "a.txt", (plain, reranked)
