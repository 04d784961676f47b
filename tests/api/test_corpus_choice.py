"""Choosing which corpora a question is asked of (`corpus_ids` on ask, ask/stream and a conversation's
messages): the run reads only the chosen ones; an id the caller cannot see (another tenant's, another
department's, or none at all) is a 400 on `corpus_ids`, before anything is searched or counted."""

from __future__ import annotations

import pytest

from agents.models import Run
from kb.models import Chunk
from tenants.scope import Scope, activate

HOTEL = "How much may employees spend on hotels per night?"


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


def runs(world) -> int:
    with activate(Scope.system(world.a.id)):
        return Run.objects.for_scope(Scope.system(world.a.id)).count()


def test_an_unseen_corpus_is_refused_on_every_way_to_ask_and_nothing_is_searched(world):
    cases = [("a-reader", world.b_corpus.id), ("a-sales-reader", world.eng_corpus.id), ("a-reader", 987654321),
             ("b-reader", world.shared.id)]
    for who, corpus_id in cases:
        client = world.client(who)
        cid = client.post("/api/v1/conversations/", {}, format="json").json()["id"]
        before = runs(world)
        for path, body in (("/api/v1/ask/", {"question": HOTEL}), ("/api/v1/ask/stream/", {"question": HOTEL}),
                           (f"/api/v1/conversations/{cid}/messages/", {"message": HOTEL}),
                           (f"/api/v1/conversations/{cid}/messages/stream/", {"message": HOTEL})):
            r = client.post(path, {**body, "corpus_ids": [world.shared.id, corpus_id] if who != "b-reader" else [corpus_id]},
                            format="json")
            assert r.status_code == 400 and list(r.json()["error"]["fields"]) == ["corpus_ids"], (who, path, r.content)
            assert str(corpus_id) in r.json()["error"]["fields"]["corpus_ids"][0]
            assert "globex" not in r.content.decode().lower()
        assert runs(world) == before, who  # refused before any run: nothing searched, nothing stored
    r = world.client("a-reader").post("/api/v1/ask/", {"question": HOTEL, "corpus_ids": []}, format="json")
    assert r.status_code == 400 and "corpus_ids" in r.json()["error"]["fields"]


def test_the_run_reads_only_the_chosen_corpora(world):
    reader = world.client("a-reader")
    narrowed = reader.post("/api/v1/ask/", {"question": HOTEL, "corpus_ids": [world.sales_corpus.id]}, format="json")
    assert narrowed.status_code == 200, narrowed.content
    body = narrowed.json()
    assert body["outcome"] == "not_enough_evidence"  # the hotel rule is in the shared corpus, which was not chosen
    searches = [s for s in body["steps"] if s["kind"] == "tool_call" and s["name"] == "search"]
    assert searches and all(s["effective_filter"]["applied"]["corpus_ids"] == [world.sales_corpus.id] for s in searches)
    seen = {cid for s in body["steps"] for cid in s["chunk_ids"]}
    with activate(Scope.system(world.a.id)):
        corpora = set(Chunk.objects.for_scope(Scope.system(world.a.id)).filter(pk__in=seen).values_list("corpus_id", flat=True))
    assert corpora <= {world.sales_corpus.id}

    cid = reader.post("/api/v1/conversations/", {}, format="json").json()["id"]
    chosen = reader.post(f"/api/v1/conversations/{cid}/messages/", {"message": HOTEL, "corpus_ids": [world.shared.id]},
                         format="json")
    assert chosen.status_code == 200 and chosen.json()["outcome"] == "answered"
    assert chosen.json()["citations"][0]["chunk"]["document_title"] == "Travel policy"
