"""/api/v1/sources/: same roles as corpora, credentials never returned, sync now joins a running sync,
items filtered by department, another tenant's sources are not found."""

from __future__ import annotations

import pytest

from kb.models import Source, SourceItem, SourceSync
from tenants.scope import Scope, activate
from tests.kb.sources.conftest import grant

SECRET = "api-secret-canary-93b1c0ffee"


@pytest.fixture
def share(world, settings, tmp_path):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    grant(world.a, "folder", str(tmp_path))  # an operator's grant (manage.py grant_source)
    (tmp_path / "sales").mkdir()
    (tmp_path / "eng").mkdir()
    (tmp_path / "sales" / "quota.md").write_text("# Quota\n\nThe sales quota is 40 deals per quarter.")
    (tmp_path / "eng" / "deploys.md").write_text("# Deploys\n\nEngineering deploys on Tuesdays only.")
    return tmp_path


def create(world, share, who="a-admin", **extra):
    body = {"name": "Share", "corpus": world.shared.id, "kind": "folder", "config": {"path": str(share)},
            "department_rules": [{"prefix": "sales/", "department": world.sales.id},
                                 {"prefix": "eng/", "department": world.eng.id}], "schedule_minutes": 0, **extra}
    return world.client(who).post("/api/v1/sources/", body, format="json")


def test_admins_create_readers_list_and_credentials_never_come_back(world, share, settings):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    r = create(world, share)
    assert r.status_code == 201, r.content
    source = r.json()
    assert source["has_credentials"] is False and "credentials" not in source and "secret" not in source
    s3 = world.client("a-admin").post("/api/v1/sources/", {
        "name": "Bucket", "corpus": world.shared.id, "kind": "s3",
        "config": {"bucket": "b", "endpoint_url": "http://127.0.0.1:9"},
        "credentials": {"access_key_id": "AKIA1", "secret_access_key": SECRET}}, format="json")
    assert s3.status_code == 201 and s3.json()["has_credentials"] is True and SECRET not in s3.content.decode()
    for who in ("a-admin", "a-editor", "a-reader"):
        listed = world.client(who).get("/api/v1/sources/")
        assert listed.status_code == 200 and SECRET not in listed.content.decode()
        assert {s["name"] for s in listed.json()["results"]} == {"Share", "Bucket"}
        detail = world.client(who).get(f"/api/v1/sources/{s3.json()['id']}/")
        assert detail.status_code == 200 and SECRET not in detail.content.decode()
    patched = world.client("a-admin").patch(f"/api/v1/sources/{s3.json()['id']}/", {"paused": True}, format="json")
    assert patched.status_code == 200 and patched.json()["paused"] is True and SECRET not in patched.content.decode()
    for who in ("a-editor", "a-reader", "a-auditor"):
        assert create(world, share, who, name=f"by {who}").status_code == 403
    assert world.client("a-auditor").get("/api/v1/sources/").status_code == 403


def test_sync_now_mirrors_the_folder_and_reports_a_summary(world, share, django_capture_on_commit_callbacks):
    source = create(world, share).json()
    with django_capture_on_commit_callbacks(execute=True):  # no broker: the sync runs after commit, in process
        r = world.client("a-admin").post(f"/api/v1/sources/{source['id']}/sync/")
    assert r.status_code == 202, r.content
    sync = world.client("a-admin").get(f"/api/v1/sources/{source['id']}/").json()["last_sync"]
    assert (sync["status"], sync["added"], sync["failed"], r.json()["joined"]) == ("done", 2, 0, False)
    detail = world.client("a-reader").get(f"/api/v1/sources/{source['id']}/").json()
    assert detail["last_sync"]["id"] == sync["id"] and detail["last_sync"]["added"] == 2
    syncs = world.client("a-reader").get(f"/api/v1/sources/{source['id']}/syncs/").json()["results"]
    assert [s["id"] for s in syncs] == [sync["id"]]
    assert world.client("a-editor").post(f"/api/v1/sources/{source['id']}/sync/").status_code == 403


def test_sync_now_joins_a_sync_already_queued(world, share):
    source = create(world, share).json()
    scope = Scope.system(world.a.id)
    with activate(scope):
        queued = SourceSync.objects.create(tenant_id=world.a.id, source_id=source["id"], status="queued")
    r = world.client("a-admin").post(f"/api/v1/sources/{source['id']}/sync/")
    assert r.status_code == 200 and r.json()["joined"] is True and r.json()["sync"]["id"] == queued.pk


def test_items_are_filtered_by_department(world, share, django_capture_on_commit_callbacks):
    source = create(world, share).json()
    with django_capture_on_commit_callbacks(execute=True):
        world.client("a-admin").post(f"/api/v1/sources/{source['id']}/sync/")
    everyone = world.client("a-reader").get(f"/api/v1/sources/{source['id']}/items/").json()["results"]
    assert {i["key"] for i in everyone} == {"sales/quota.md", "eng/deploys.md"}
    sales_only = world.client("a-sales-reader").get(f"/api/v1/sources/{source['id']}/items/").json()["results"]
    assert {i["key"] for i in sales_only} == {"sales/quota.md"}
    docs = world.client("a-sales-reader").get("/api/v1/documents/").content.decode()
    assert "deploys" not in docs


def test_rules_may_not_widen_and_other_tenants_sources_are_not_found(world, share):
    # a department admin: only its department's corpora, and rules only into its departments
    assert create(world, share, "a-sales-admin").status_code in (400, 403)
    r = create(world, share, "a-sales-admin", corpus=world.sales_corpus.id, department_rules=[])
    assert r.status_code == 201, r.content
    bad = create(world, share, "a-sales-admin", name="x", corpus=world.sales_corpus.id,
                 department_rules=[{"prefix": "", "department": world.eng.id}])
    assert bad.status_code == 400 and "department_rules" in bad.content.decode()
    mine = create(world, share, name="Mine").json()
    b_admin = world.client("b-admin")
    for method, url in (("get", f"/api/v1/sources/{mine['id']}/"), ("patch", f"/api/v1/sources/{mine['id']}/"),
                        ("delete", f"/api/v1/sources/{mine['id']}/"), ("post", f"/api/v1/sources/{mine['id']}/sync/"),
                        ("get", f"/api/v1/sources/{mine['id']}/items/"), ("get", f"/api/v1/sources/{mine['id']}/syncs/")):
        assert getattr(b_admin, method)(url, {}, format="json").status_code == 404
    assert b_admin.get("/api/v1/sources/").json()["results"] == []
    b_rule = create(world, share, "b-admin", name="b", corpus=world.b_corpus.id,
                    department_rules=[{"prefix": "", "department": world.sales.id}])
    assert b_rule.status_code == 400
    with activate(Scope.system(world.b.id)):
        assert not Source.objects.for_scope(Scope.system(world.b.id)).exists()
        assert not SourceItem.objects.for_scope(Scope.system(world.b.id)).exists()


def test_a_folder_granted_to_another_tenant_or_outside_the_grants_is_a_400_naming_config_path(
        world, share, settings, tmp_path_factory, django_capture_on_commit_callbacks):
    """Issue 47, finding 1: tenant B may not attach tenant A's folder (nor any folder not granted to B)."""
    globex, free = tmp_path_factory.mktemp("globex"), tmp_path_factory.mktemp("free")
    (globex / "memo.md").write_text("# Memo\n\nGlobex ships on Mondays.\n")
    settings.SOURCES_FOLDER_ROOTS = [str(share), str(globex), str(free)]
    grant(world.b, "folder", str(globex))
    b_admin = world.client("b-admin")

    def post(path: str):
        return b_admin.post("/api/v1/sources/", {"name": f"probe {path}", "corpus": world.b_corpus.id, "kind": "folder",
                                                 "config": {"path": path}, "schedule_minutes": 0}, format="json")

    for path in (str(share), str(share / "sales"), f"{globex}/../{share.name}", str(free)):
        r = post(path)
        assert r.status_code == 400, r.content
        assert r.json()["error"]["fields"]["config"] == ["config.path: not under a folder granted to this tenant"]
    mine = post(str(globex))
    assert mine.status_code == 201, mine.content
    patched = b_admin.patch(f"/api/v1/sources/{mine.json()['id']}/", {"config": {"path": str(share)}}, format="json")
    assert patched.status_code == 400 and "config.path" in patched.json()["error"]["message"]
    with django_capture_on_commit_callbacks(execute=True):
        assert b_admin.post(f"/api/v1/sources/{mine.json()['id']}/sync/").status_code == 202
    with activate(Scope.system(world.b.id)):
        keys = set(SourceItem.objects.for_scope(Scope.system(world.b.id)).values_list("key", flat=True))
        assert keys == {"memo.md"}  # nothing of tenant A's folder
        assert Source.objects.for_scope(Scope.system(world.b.id)).get().config == {"path": str(globex), "include_hidden": False}
