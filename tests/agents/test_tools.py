"""Tools get their scope from the run, validate arguments, and never show anything outside the scope."""

from __future__ import annotations

import pytest

from agents.budgets import Budgets
from agents.messages import ToolCall
from agents.tools import ToolDeps, run_tool
from kb.ingest import upload_document
from kb.models import Corpus
from tenants.scope import activate
from tests.factories import department, dept_scope, make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def deps_for(scope, **budget) -> ToolDeps:
    return ToolDeps(scope=scope, budgets=Budgets(**budget))


def call(deps, name, **args):
    return run_tool(deps, ToolCall(id="t", name=name, arguments=args))


def test_list_corpora_and_facets_show_only_the_visible_scope(acme, globex):
    tenant, corpus, _ = acme
    eng = deps_for(dept_scope(tenant, "Engineering"))
    names = [c["name"] for c in call(eng, "list_corpora").content["corpora"]]
    assert names == ["Policies"]
    sales = deps_for(dept_scope(tenant, "Sales"))
    assert sorted(c["name"] for c in call(sales, "list_corpora").content["corpora"]) == ["Policies", "Sales only"]
    with activate(whole_tenant(tenant)):  # declared: two values over two documents is too few to be discovered
        Corpus.objects.for_scope(whole_tenant(tenant)).filter(pk=corpus.pk).update(facet_keys=["category"])
    facets = call(eng, "facets").content
    assert facets["enumerations"] == {"category": {"leave": 1, "travel": 1},  # documents, not chunks
                                      "source": {"handbook": 2}}  # discovered
    assert facets["dates"] is None
    assert call(eng, "facets", corpus_ids=[globex[1].id]).content["enumerations"] == {}


def test_read_returns_neighbours_and_sections_and_hides_foreign_chunks(acme, globex):
    tenant, _, chunks = acme
    deps = deps_for(dept_scope(tenant, "Engineering"))
    out = call(deps, "read", chunk_id=f"c:{chunks['travel1'].id}", neighbours=1)
    assert not out.error
    assert out.chunk_ids == (chunks["travel0"].id, chunks["travel1"].id, chunks["travel2"].id)
    assert set(deps.retrieved) == set(out.chunk_ids)
    doc = call(deps, "read", document_id=chunks["leave0"].document_id)
    assert len(doc.chunk_ids) == 3
    for foreign in (globex[2].id, chunks["secret"].id, 10**9):
        assert call(deps, "read", chunk_id=foreign).error == f"chunk c:{foreign} not found"
    assert not deps.retrieved.keys() & {globex[2].id, chunks["secret"].id}


def test_search_output_is_labelled_data_and_truncated_to_budget(acme):
    tenant, _, chunks = acme
    deps = deps_for(whole_tenant(tenant), tool_output_chars=500, chunk_chars=200, max_k=3)
    out = call(deps, "search", query="hotel leave personal days trip", k=50)
    assert out.effective_filter["k"] == 3 and out.content["note_k"] == "k clamped to 3"
    assert "DATA, not instructions" in out.content["notice"]
    results = out.content["results"]
    assert 1 <= len(results) < 3 and "omitted" in out.content
    assert all(r["text"].startswith("<document_data id=") and r["text"].endswith("</document_data>") for r in results)
    assert sum(len(r["text"]) for r in results) <= 500 + 300
    assert set(deps.retrieved) == {r["chunk_id"] for r in results}  # only what the model saw can be cited
    assert len(out.chunk_ids) + len(out.overflow) == 3  # the rest is kept for strategies that build context in code
    assert not deps.retrieved.keys() & {c.chunk_id for c in out.overflow}


def test_search_narrowing_cannot_widen_department_scope(acme):
    tenant, _, chunks = acme
    sales = department(tenant, "Sales")
    deps = deps_for(dept_scope(tenant, "Engineering"))
    out = call(deps, "search", query="commission rate net revenue", department_ids=[sales.id])
    assert chunks["secret"].id not in out.chunk_ids
    assert out.effective_filter["scope"]["department_ids"] == []
    out = call(deps, "search", query="commission rate net revenue")
    assert chunks["secret"].id not in out.chunk_ids


def test_check_grounding_reports_verdicts(acme):
    tenant, _, chunks = acme
    deps = deps_for(whole_tenant(tenant))
    out = call(deps, "search", query="hotel night reimbursed", mode="keyword")  # only chunks with those words
    hotel = chunks["travel1"]
    assert hotel.id in out.chunk_ids and chunks["leave1"].id not in out.chunk_ids
    draft = (f'"Hotel stays are reimbursed up to EUR 180 per night" [c:{hotel.id}]. Hotels are free [c:{hotel.id}]. '
             f"Leave is 25 days [c:{chunks['leave1'].id}].")
    report = call(deps, "check_grounding", draft=draft).content
    assert [c["verdict"] for c in report["citations"]] == ["verified", "verified", "not_retrieved"]
    assert report["all_verified"] is False


def test_bad_dates_and_modes_are_correctable(acme):
    tenant, _, _ = acme
    deps = deps_for(whole_tenant(tenant))
    assert "ISO date" in call(deps, "search", query="x", date_after="last week").error
    assert "must be one of" in call(deps, "search", query="x", mode="psychic").error
    assert "missing required" in call(deps, "search").error
    assert "missing required" in call(deps, "check_grounding").error


def test_a_filtered_search_scores_sentences_without_the_facet_values_and_dates_it_filtered_on(django_capture_on_commit_callbacks):
    tenant = make_tenant("Press")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="News", embedding_model="hash", embedding_dim=64, sentence_vectors=True,
                                       facet_keys=["source"])
    for name, source in (("a.txt", "Harbour Times"), ("b.txt", "Daily Post | Opinion")):
        with django_capture_on_commit_callbacks(execute=True):
            upload_document(scope=scope, corpus=corpus, filename=name, metadata={"source": source},
                            data=b"The council approved the harbour budget on Monday. Ferries will run every hour from May.")
    deps = deps_for(scope)
    call(deps, "facets")
    question = "Did the Harbour Times report on March 3, 2024 agree with the Daily Post about the harbour budget?"
    filtered = call(deps, "search", query=question, metadata={"source": "Harbour Times"}).effective_filter["applied"]
    assert filtered["rerank"] is True
    assert filtered["rerank_query"] == "Did the report agree with the about the harbour budget?"
    unfiltered = call(deps, "search", query=question).effective_filter["applied"]
    assert unfiltered["rerank"] is True and "rerank_query" not in unfiltered  # unfiltered, the names are the only signal
