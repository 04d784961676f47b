"""Corpora: CRUD, field errors, roles, departments and foreign ids."""

from __future__ import annotations

import pytest

from tests.api.conftest import CANARY
from tests.factories import departments_of

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def test_list_shows_only_own_tenant_and_pages_with_a_cursor(world):
    r = world.client("a-reader").get("/api/v1/corpora/", {"page_size": 2})
    assert r.status_code == 200
    body = r.json()
    assert len(body["results"]) == 2 and body["next"] and body["previous"] is None
    r2 = world.client("a-reader").get(body["next"])
    names = {c["name"] for c in body["results"] + r2.json()["results"]}
    assert names == {"shared", "sales-only", "eng-only"}
    assert CANARY not in r.content.decode() + r2.content.decode()


def test_department_key_sees_only_its_departments(world):
    r = world.client("a-sales-reader").get("/api/v1/corpora/")
    assert {c["name"] for c in r.json()["results"]} == {"shared", "sales-only"}
    assert world.client("a-sales-reader").get(f"/api/v1/corpora/{world.eng_corpus.id}/").status_code == 404


def test_create_update_delete(world):
    c = world.client("a-admin")
    r = c.post("/api/v1/corpora/", {"name": "HR", "description": "people", "department": world.sales.id}, format="json")
    assert r.status_code == 201, r.content
    cid = r.json()["id"]
    assert r.json()["department"] == world.sales.id and r.json()["document_count"] == 0
    r = c.patch(f"/api/v1/corpora/{cid}/", {"description": "people ops"}, format="json")
    assert r.status_code == 200 and r.json()["description"] == "people ops"
    assert c.get(f"/api/v1/corpora/{cid}/").json()["document_count"] == 0
    assert c.delete(f"/api/v1/corpora/{cid}/").status_code == 204
    assert c.get(f"/api/v1/corpora/{cid}/").status_code == 404


@pytest.mark.parametrize("body,field", [
    ({}, "name"),
    ({"name": "  "}, "name"),
    ({"name": "shared"}, "name"),  # duplicate in the tenant
    ({"name": "x", "department": 99999999}, "department"),
    ({"name": "x", "chunk_target_tokens": 100, "chunk_overlap_tokens": 100}, "chunk_overlap_tokens"),
    ({"name": "x", "chunk_target_tokens": "lots"}, "chunk_target_tokens"),
])
def test_bad_input_names_the_field(world, body, field):
    r = world.client("a-admin").post("/api/v1/corpora/", body, format="json")
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] and field in err["fields"], err


def test_foreign_department_is_not_found_on_the_field(world):
    globex_dept = departments_of(world.b)[0]
    r = world.client("a-admin").post("/api/v1/corpora/", {"name": "x", "department": globex_dept.id}, format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["department"] == ["department not found"]


def test_department_admin_cannot_place_a_corpus_in_another_department(world):
    r = world.client("a-sales-admin").post("/api/v1/corpora/", {"name": "x", "department": world.eng.id}, format="json")
    assert r.status_code == 400 and "department" in r.json()["error"]["fields"]


@pytest.mark.parametrize("who", ["a-reader", "a-editor", "a-auditor"])
def test_only_admins_write_corpora(world, who):
    c = world.client(who)
    assert c.post("/api/v1/corpora/", {"name": "nope"}, format="json").status_code == 403
    assert c.patch(f"/api/v1/corpora/{world.shared.id}/", {"name": "nope"}, format="json").status_code == 403
    r = c.delete(f"/api/v1/corpora/{world.shared.id}/")
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied"


def test_auditor_cannot_read_corpora(world):
    assert world.client("a-auditor").get("/api/v1/corpora/").status_code == 403


def test_unauthenticated_and_bad_key(world):
    r = world.client(None).get("/api/v1/corpora/")
    assert r.status_code == 401 and r.json()["error"]["code"] == "not_authenticated"
    c = world.client(None)
    c.credentials(HTTP_AUTHORIZATION="Bearer gk_0000_nope")
    assert c.get("/api/v1/corpora/").status_code == 401
    c.credentials(HTTP_X_API_KEY=world.keys["a-reader"])
    assert c.get("/api/v1/corpora/").status_code == 200


def test_another_tenants_corpus_is_404_like_a_missing_one(world):
    c = world.client("a-admin")
    foreign = c.get(f"/api/v1/corpora/{world.b_corpus.id}/")
    missing = c.get("/api/v1/corpora/987654321/")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()
    assert c.patch(f"/api/v1/corpora/{world.b_corpus.id}/", {"name": "pwn"}, format="json").status_code == 404
    assert c.delete(f"/api/v1/corpora/{world.b_corpus.id}/").status_code == 404
    r = world.client("b-admin").get(f"/api/v1/corpora/{world.b_corpus.id}/")
    assert r.status_code == 200 and CANARY in r.json()["name"]


def test_department_cannot_change_after_creation(world):
    c = world.client("a-admin")
    r = c.patch(f"/api/v1/corpora/{world.sales_corpus.id}/", {"department": world.eng.id}, format="json")
    assert r.status_code == 400 and "department" in r.json()["error"]["fields"]
    r = c.patch(f"/api/v1/corpora/{world.sales_corpus.id}/", {"department": world.sales.id, "description": "d"}, format="json")
    assert r.status_code == 200


def test_tenant_data_is_not_cacheable(world):
    assert world.client("a-reader").get("/api/v1/corpora/")["Cache-Control"] == "private, no-store"


def test_department_admin_reads_but_cannot_change_tenant_wide_corpora(world):
    """Writes are narrower than reads: a Sales-limited admin sees the tenant-wide corpus but may not
    rename, delete, re-embed or create one (what every department reads is the whole tenant's)."""
    c = world.client("a-sales-admin")
    assert c.get(f"/api/v1/corpora/{world.shared.id}/").status_code == 200
    r = c.patch(f"/api/v1/corpora/{world.shared.id}/", {"description": "sales wrote this"}, format="json")
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied", r.content
    assert c.delete(f"/api/v1/corpora/{world.shared.id}/").status_code == 403
    r = c.post("/api/v1/corpora/", {"name": "tenant-wide by sales"}, format="json")
    assert r.status_code == 400 and "department" in r.json()["error"]["fields"]
    # Its own department's corpus stays its to manage.
    assert c.patch(f"/api/v1/corpora/{world.sales_corpus.id}/", {"description": "ok"}, format="json").status_code == 200
    assert c.post("/api/v1/corpora/", {"name": "sales 2", "department": world.sales.id}, format="json").status_code == 201
    # Nothing changed in the tenant-wide corpus; a whole-tenant admin still manages it.
    admin = world.client("a-admin")
    assert admin.get(f"/api/v1/corpora/{world.shared.id}/").json()["description"] == ""
    assert admin.patch(f"/api/v1/corpora/{world.shared.id}/", {"description": "all"}, format="json").status_code == 200


def test_choose_the_embedding_model_at_creation_and_reembed_over_the_api(world, django_capture_on_commit_callbacks):
    from tests.api.conftest import ingest

    c = world.client("a-admin")
    r = c.post("/api/v1/corpora/", {"name": "hashed", "embedding_model": "hash", "embedding_dim": 32}, format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["embedding_model"], body["embedding_dim"], body["reembedding_to"]) == ("hash", 32, None)
    from kb.models import Corpus
    from tenants.scope import activate
    from tests.factories import whole_tenant
    with activate(whole_tenant(world.a)):
        corpus = Corpus.objects.for_scope(whole_tenant(world.a)).get(pk=body["id"])
    ingest(corpus, "Parking", "Staff park in the north garage for free.")
    # The model changes only by re-embedding; PATCH names the way.
    r = c.patch(f"/api/v1/corpora/{corpus.id}/", {"embedding_dim": 16}, format="json")
    assert r.status_code == 400 and "reembed" in r.json()["error"]["fields"]["embedding_dim"][0]
    with django_capture_on_commit_callbacks(execute=True):
        r = c.post(f"/api/v1/corpora/{corpus.id}/reembed/", {"embedding_model": "hash", "embedding_dim": 16}, format="json")
    assert r.status_code == 202, r.content
    job = c.get(f"/api/v1/jobs/{r.json()['id']}/").json()
    assert (job["kind"], job["status"], job["corpus"]) == ("reembed", "done", corpus.id)
    after = c.get(f"/api/v1/corpora/{corpus.id}/").json()
    assert (after["embedding_model"], after["embedding_dim"], after["reembedding_to"]) == ("hash", 16, None)
    hits = c.post("/api/v1/search/", {"query": "where do staff park", "mode": "vector", "filters": {"corpus_ids": [corpus.id]}},
                  format="json").json()["hits"]
    assert hits and "north garage" in hits[0]["text"]
    # Already on that model: nothing to do, the corpus comes back.
    r = c.post(f"/api/v1/corpora/{corpus.id}/reembed/", {"embedding_model": "hash", "embedding_dim": 16}, format="json")
    assert r.status_code == 200 and r.json()["id"] == corpus.id


@pytest.mark.parametrize("body,field,on_create", [
    ({"embedding_model": "no-such-model", "embedding_dim": 8}, "embedding_model", "embedding_model"),
    ({"embedding_model": "hash:16", "embedding_dim": 16}, "embedding_model", "embedding_model"),
    ({"embedding_model": "hash", "embedding_dim": 0}, "embedding_dim", "embedding_dim"),
    ({"embedding_model": "hash", "embedding_dim": 99999}, "embedding_dim", "embedding_dim"),
    ({"embedding_model": "minilm-l6-v2", "embedding_dim": 128}, "embedding_dim", "embedding_dim"),
    ({"embedding_dim": 16}, "embedding_model", "embedding_dim"),  # on creation the model defaults to minilm-l6-v2 (384)
])
def test_reembed_bad_input_names_the_field_and_changes_nothing(world, body, field, on_create):
    c = world.client("a-admin")
    r = c.post(f"/api/v1/corpora/{world.shared.id}/reembed/", body, format="json")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.content
    assert c.get(f"/api/v1/corpora/{world.shared.id}/").json()["reembedding_to"] is None
    r = c.post("/api/v1/corpora/", {"name": "bad model", **body}, format="json")
    assert r.status_code == 400 and on_create in r.json()["error"]["fields"], r.content


def test_reembed_needs_a_whole_tenant_admin_for_tenant_wide_corpora(world):
    body = {"embedding_model": "hash", "embedding_dim": 16}
    for who in ("a-reader", "a-editor"):
        assert world.client(who).post(f"/api/v1/corpora/{world.shared.id}/reembed/", body, format="json").status_code == 403
    r = world.client("a-sales-admin").post(f"/api/v1/corpora/{world.shared.id}/reembed/", body, format="json")
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied"
    r = world.client("a-sales-admin").post(f"/api/v1/corpora/{world.shared.id}/reembed/", {"embedding_model": "?"}, format="json")
    assert r.status_code == 403  # refused before the body is looked at
    assert world.client("a-admin").post(f"/api/v1/corpora/{world.b_corpus.id}/reembed/", body, format="json").status_code == 404
    assert world.client("a-admin").get(f"/api/v1/corpora/{world.shared.id}/").json()["reembedding_to"] is None
