"""Corpus files through the API and the admin (kb.transfer): tenant admins export their own corpora only,
an import lands in the caller's tenant, twice is once, and a bad file is a 400 naming the problem."""

from __future__ import annotations

import gzip
import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from kb.models import Chunk, Corpus
from tenants.scope import activate
from tests.api.conftest import CANARY
from tests.api.test_admin import staff
from tests.factories import whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


def export(world, who: str, corpus: Corpus, query: str = "") -> bytes:
    r = world.client(who).get(f"/api/v1/corpora/{corpus.pk}/export/{query}")
    assert r.status_code == 200, r.content
    assert r["Content-Type"] == "application/gzip"
    return b"".join(r.streaming_content)


def post_import(world, who: str, data: bytes, **fields):
    return world.client(who).post("/api/v1/corpora/import/",
                                  {"file": SimpleUploadedFile("corpus.jsonl.gz", data), **fields}, format="multipart")


def corpora_of(tenant) -> dict[str, int]:
    scope = whole_tenant(tenant)
    with activate(scope):
        return {c.name: c.chunk_count for c in Corpus.objects.for_scope(scope)}


def test_an_admin_moves_a_corpus_to_another_tenant_through_the_api(world):
    data = export(world, "a-admin", world.shared)
    r = post_import(world, "b-admin", data)
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["created"] and body["documents"] == 1 and body["corpus"]["name"] == "shared"
    again = post_import(world, "b-admin", data)
    assert again.status_code == 200 and again.json()["created"] is False and "already imported" in again.json()["message"]
    assert corpora_of(world.b)["shared"] == body["chunks"]
    found = world.client("b-reader").post("/api/v1/search/", {"query": "hotel per night", "mode": "keyword"}, format="json").json()
    assert any("150 EUR" in h["text"] for h in found["hits"])
    # Tenant A sees nothing of B's copy.
    listed = world.client("a-admin").get("/api/v1/corpora/").json()["results"]
    assert body["corpus"]["id"] not in {c["id"] for c in listed}
    assert world.client("a-admin").get(f"/api/v1/corpora/{body['corpus']['id']}/export/").status_code == 404


def test_only_admins_of_the_corpus_export_it(world):
    assert world.client("a-admin").get(f"/api/v1/corpora/{world.b_corpus.pk}/export/").status_code == 404
    assert world.client("a-reader").get(f"/api/v1/corpora/{world.shared.pk}/export/").status_code == 403
    assert world.client("a-editor").get(f"/api/v1/corpora/{world.shared.pk}/export/").status_code == 403
    assert world.client("a-sales-admin").get(f"/api/v1/corpora/{world.shared.pk}/export/").status_code == 403
    assert world.client("a-sales-admin").get(f"/api/v1/corpora/{world.eng_corpus.pk}/export/").status_code == 404
    assert export(world, "a-sales-admin", world.sales_corpus, "?include_bytes=false")
    assert world.client("a-admin").get(f"/api/v1/corpora/{world.shared.pk}/export/?include_bytes=maybe").status_code == 400
    assert world.client("a-reader").post("/api/v1/corpora/import/", {}, format="multipart").status_code == 403


def zipped(data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("corpus.jsonl.gz", data)
    return out.getvalue()


@pytest.mark.parametrize(("damage", "field", "words"), [
    (lambda d: d[:-30], "file", "truncated"),
    (zipped, "file", "zip archive"),
    (gzip.decompress, "file", "not gzip-compressed"),
    (lambda d: gzip.compress(gzip.decompress(d).replace(b'"title":"', b'"title":"X', 1)), "file", "digest"),
])
def test_a_bad_file_is_a_400_naming_it_and_nothing_is_written(world, damage, field, words):
    data = export(world, "a-admin", world.shared)
    before = corpora_of(world.b)
    r = post_import(world, "b-admin", damage(data))
    assert r.status_code == 400, r.content
    assert words in " ".join(r.json()["error"]["fields"][field])
    assert corpora_of(world.b) == before


def test_bad_import_arguments_are_400s(world):
    data = export(world, "a-admin", world.shared)
    assert post_import(world, "b-admin", data, department=world.sales.pk).status_code == 400  # A's department
    assert "reembed" in post_import(world, "b-admin", data, reembed="no model").json()["error"]["fields"]
    r = post_import(world, "b-admin", data, reembed="nope:12")
    assert r.status_code == 400 and "reembed" in r.json()["error"]["fields"]
    assert "file" in world.client("b-admin").post("/api/v1/corpora/import/", {}, format="multipart").json()["error"]["fields"]
    # A department-limited admin imports into its own department only.
    assert post_import(world, "a-sales-admin", data, name="copy").status_code in (400, 403)
    r = post_import(world, "a-sales-admin", data, name="copy", department=world.sales.pk)
    assert r.status_code == 201 and r.json()["corpus"]["department"] == world.sales.pk


def test_the_admin_exports_its_own_corpus_and_imports_a_file(client, world):
    client.force_login(staff(world, "admin"))
    foreign = client.post("/admin/kb/corpus/", {"action": "export_file", "_selected_action": [world.b_corpus.pk]})
    assert foreign.get("Content-Type") != "application/gzip" and CANARY not in foreign.content.decode(errors="replace")
    r = client.post("/admin/kb/corpus/", {"action": "export_file", "_selected_action": [world.shared.pk]})
    assert r.status_code == 200 and r["Content-Type"] == "application/gzip"
    data = b"".join(r.streaming_content)
    assert client.get("/admin/kb/corpus/import/").status_code == 200
    posted = client.post("/admin/kb/corpus/import/", {"file": SimpleUploadedFile("c.jsonl.gz", data), "name": "shared copy"})
    assert posted.status_code == 302
    assert "shared copy" in corpora_of(world.a) and "shared copy" not in corpora_of(world.b)
    refused = client.post("/admin/kb/corpus/import/", {"file": SimpleUploadedFile("c.jsonl.gz", data[:-20]), "name": "x"})
    assert refused.status_code == 200 and "truncated" in refused.content.decode()
    with activate(whole_tenant(world.a)):
        assert not Corpus.objects.for_scope(whole_tenant(world.a)).filter(name="x").exists()
        assert Chunk.objects.for_scope(whole_tenant(world.a)).filter(corpus__name="shared copy").count() == \
            corpora_of(world.a)["shared"]
