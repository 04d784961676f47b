"""Sources in the admin: add (credentials typed once, never shown again), sync now, the last-sync
summary and failures on the change page, pause, another tenant's source not reachable; the audit
review names the sync that produced a cited document's version."""

from __future__ import annotations

import pytest

from agents.services import ask
from kb.models import Source, SourceSync
from tenants.scope import activate
from tests.api.test_admin import staff
from tests.factories import whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.sources.conftest import S3_ACCESS_KEY, S3_SECRET_KEY, _moto, bucket, grant, s3_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


@pytest.fixture
def share(settings, tmp_path, world):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    grant(world.a, "folder", str(tmp_path))  # an operator's grant (manage.py grant_source)
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    (tmp_path / "handbook.md").write_text("# Handbook\n\nThe parking allowance is 12 EUR per day, says the handbook.")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 broken")
    return tmp_path


def test_admin_adds_syncs_pauses_and_never_shows_credentials(client, world, share, bucket):  # noqa: F811
    client.force_login(staff(world, "admin"))
    r = client.post("/admin/kb/source/add/", {
        "name": "Share", "corpus": world.shared.id, "kind": "folder", "folder_path": str(share), "schedule_minutes": 60})
    assert r.status_code == 302, r.content.decode()[:3000]
    listing = client.get("/admin/kb/source/").content.decode()
    assert "done: +1" in listing and "!1" in listing  # the first sync ran on create (no broker in tests: after commit)
    client_s3, name = bucket
    r = client.post("/admin/kb/source/add/", {
        "name": "Bucket", "corpus": world.shared.id, "kind": "s3", "s3_bucket": name,
        "s3_endpoint_url": client_s3.meta.endpoint_url, "s3_access_key_id": S3_ACCESS_KEY,
        "s3_secret_access_key": S3_SECRET_KEY, "schedule_minutes": 0, "paused": "on"})
    assert r.status_code == 302, r.content.decode()[:3000]
    with activate(whole_tenant(world.a)):
        share_source = Source.objects.for_scope(whole_tenant(world.a)).get(name="Share")
        bucket_source = Source.objects.for_scope(whole_tenant(world.a)).get(name="Bucket")
    assert bucket_source.secret and S3_SECRET_KEY not in bucket_source.secret
    page = client.get(f"/admin/kb/source/{bucket_source.pk}/change/").content.decode()
    assert S3_SECRET_KEY not in page and "credentials stored" in page.lower()
    r = client.post("/admin/kb/source/", {"action": "sync_now", "_selected_action": [share_source.pk]})
    assert r.status_code == 302
    listing = client.get("/admin/kb/source/").content.decode()
    assert "done: +0" in listing and "!1" in listing and S3_SECRET_KEY not in listing
    page = client.get(f"/admin/kb/source/{share_source.pk}/change/").content.decode()
    assert "Recent syncs" in page and "broken.pdf" in page and "parse error" in page
    client.post("/admin/kb/source/", {"action": "pause", "_selected_action": [share_source.pk]})
    with activate(whole_tenant(world.a)):
        assert Source.objects.for_scope(whole_tenant(world.a)).get(pk=share_source.pk).paused

    # the audit review names the sync that produced the cited version
    run = ask(scope=whole_tenant(world.a), question="What is the parking allowance per day?", strategy="classic",
              provider="offline")
    with activate(whole_tenant(world.a)):
        sync = SourceSync.objects.for_scope(whole_tenant(world.a)).filter(source=share_source).order_by("id").first()
    trace = client.get(f"/admin/agents/run/{run.id}/change/").content.decode()
    assert f"from source Share sync {sync.pk}" in trace

    other = client.get(f"/admin/kb/source/{bucket_source.pk}/change/")
    client.force_login(staff(world, "admin", tenant=world.b))
    assert client.get(f"/admin/kb/source/{bucket_source.pk}/change/").status_code in (302, 404)
    assert "Share" not in client.get("/admin/kb/source/").content.decode()
    assert other.status_code == 200


def test_the_add_form_refuses_another_tenants_folder_with_a_form_error(client, world, share, settings, tmp_path_factory):
    """Issue 47, finding 1, through the admin: tenant B's admin cannot attach tenant A's granted folder
    (nor one outside B's grants): the config field says why and nothing is saved."""
    globex = tmp_path_factory.mktemp("globex")
    settings.SOURCES_FOLDER_ROOTS = [str(share), str(globex)]
    grant(world.b, "folder", str(globex))
    client.force_login(staff(world, "admin", tenant=world.b))
    for path in (str(share), str(share / "sub"), "/etc"):
        r = client.post("/admin/kb/source/add/", {
            "name": "Probe", "corpus": world.b_corpus.id, "kind": "folder", "folder_path": path, "schedule_minutes": 0})
        assert r.status_code == 200, r.status_code
        errors = r.context["adminform"].form.errors
        assert list(errors) == ["folder_path"] and "config.path: not under a folder" in errors["folder_path"][0], errors
    with activate(whole_tenant(world.b)):
        assert not Source.objects.for_scope(whole_tenant(world.b)).exists()
    r = client.post("/admin/kb/source/add/", {
        "name": "Mine", "corpus": world.b_corpus.id, "kind": "folder", "folder_path": str(globex), "schedule_minutes": 0})
    assert r.status_code == 302, r.content.decode()[:2000]
