"""Issue 47, findings 3 and 4, through the API and the admin: a website or S3 source pointed at a cloud
metadata address or shared address space (100.64/10) is refused with a 400 naming the field; stored
credentials do not follow a changed address (has_credentials turns false, and the next sync sends no
Authorization header to the new host)."""

from __future__ import annotations

import pytest

from kb.models import Source
from tenants.scope import activate
from tests.api.test_admin import staff
from tests.factories import whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.sources.test_outbound_policy import Recorder

TOKEN = "Bearer outbound-canary-5d1e"


@pytest.fixture
def hosts():
    """Two loopback web servers: the source's first host and the one it is moved to."""
    made = [Recorder(), Recorder()]
    for r in made:
        r.routes["/robots.txt"] = (404, {"Content-Type": "text/plain"}, b"")
    yield made
    for r in made:
        r.close()


def post(world, body: dict):
    return world.client("a-admin").post("/api/v1/sources/", {"corpus": world.shared.id, "schedule_minutes": 0, **body},
                                        format="json")


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "config", "field", "reason"), [
    ("website", {"start_url": "http://100.100.100.200/latest/meta-data/"}, "config.start_url", "cloud metadata"),
    ("website", {"start_url": "http://100.64.0.1/"}, "config.start_url", "shared address space"),
    ("website", {"start_url": "http://100.127.255.254:8080/x"}, "config.start_url", "shared address space"),
    ("website", {"start_url": "http://[::ffff:a9fe:a9fe]/"}, "config.start_url", "cloud metadata"),
    ("s3", {"bucket": "b", "endpoint_url": "http://100.64.0.1"}, "config.endpoint_url", "shared address space"),
    ("s3", {"bucket": "b", "endpoint_url": "http://100.100.100.200"}, "config.endpoint_url", "cloud metadata"),
])
def test_finding_3_metadata_and_shared_addresses_are_refused_by_the_api(world, settings, kind, config, field, reason):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = False
    r = post(world, {"name": "Probe", "kind": kind, "config": config})
    assert r.status_code == 400, r.content
    assert field in r.content.decode() and reason in r.content.decode()
    with activate(whole_tenant(world.a)):
        assert not Source.objects.for_scope(whole_tenant(world.a)).filter(name="Probe").exists()


@pytest.mark.django_db
def test_finding_4_a_changed_address_drops_the_credentials_and_the_new_host_never_sees_them(
        world, settings, hosts, django_capture_on_commit_callbacks):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True  # the two hosts are loopback servers
    first, second = hosts
    r = post(world, {"name": "Intranet", "kind": "website", "config": {"start_url": f"http://127.0.0.1:{first.port}/"},
                     "credentials": {"authorization": TOKEN}})
    assert r.status_code == 201 and r.json()["has_credentials"] is True, r.content
    url = f"/api/v1/sources/{r.json()['id']}/"
    admin = world.client("a-admin")

    same_origin = admin.patch(url, {"config": {"start_url": f"http://127.0.0.1:{first.port}/handbook/"}}, format="json")
    assert same_origin.status_code == 200 and same_origin.json()["has_credentials"] is True  # same origin: kept

    moved = admin.patch(url, {"config": {"start_url": f"http://127.0.0.1:{second.port}/"}}, format="json")
    assert moved.status_code == 200 and moved.json()["has_credentials"] is False  # another port: another origin
    with django_capture_on_commit_callbacks(execute=True):
        assert admin.post(f"{url}sync/").status_code == 202
    assert admin.get(url).json()["last_sync"]["status"] == "done"
    assert second.hits and all(auth is None for _, auth in second.hits)
    assert first.hits == []

    # new credentials in the same request as the new address are kept
    both = admin.patch(url, {"config": {"start_url": f"http://127.0.0.1:{first.port}/"},
                             "credentials": {"authorization": TOKEN}}, format="json")
    assert both.status_code == 200 and both.json()["has_credentials"] is True


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "kept"), [
    ({"bucket": "policies"}, True), ({"bucket": "policies", "prefix": "hr/", "region": "eu-west-1"}, True),
    ({"bucket": "other-bucket"}, False), ({"bucket": "policies", "endpoint_url": "http://127.0.0.1:9001"}, False),
    ({"bucket": "policies", "endpoint_url": "https://127.0.0.1:9000"}, False),
    ({"bucket": "policies", "endpoint_url": "http://localhost:9000"}, False),
])
def test_finding_4_s3_credentials_are_bound_to_endpoint_and_bucket(world, settings, change, kept):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    r = post(world, {"name": "Bucket", "kind": "s3", "config": {"bucket": "policies", "endpoint_url": "http://127.0.0.1:9000"},
                     "credentials": {"access_key_id": "AKIA1", "secret_access_key": "s3-canary"}})
    assert r.status_code == 201 and r.json()["has_credentials"] is True
    config = {"endpoint_url": "http://127.0.0.1:9000", **change}
    patched = world.client("a-admin").patch(f"/api/v1/sources/{r.json()['id']}/", {"config": config}, format="json")
    assert patched.status_code == 200 and patched.json()["has_credentials"] is kept


# --- the admin -------------------------------------------------------------------------------------------

def _form(world, **fields) -> dict:
    return {"name": "Intranet", "corpus": world.shared.id, "kind": "website", "schedule_minutes": 0, **fields}


ADMIN_DB = pytest.mark.django_db(transaction=True, databases=["default", "owner"])  # staff users: the owner connection


@ADMIN_DB
def test_finding_3_the_admin_form_refuses_metadata_and_shared_addresses(client, world, settings):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = False
    client.force_login(staff(world, "admin"))
    for config, field, reason in (({"start_url": "http://100.100.100.200/latest/meta-data/"}, "config.start_url", "cloud metadata"),
                                  ({"start_url": "http://100.64.0.1/"}, "config.start_url", "shared address space")):
        r = client.post("/admin/kb/source/add/", _form(world, website_start_url=config["start_url"]))
        page = r.content.decode()
        assert r.status_code == 200 and field in page and reason in page, page[:2000]
        assert list(r.context["adminform"].form.errors) == ["website_start_url"]
    r = client.post("/admin/kb/source/add/", _form(world, kind="s3", name="Bucket", s3_bucket="b",
                                                   s3_endpoint_url="http://100.64.0.1"))
    assert r.status_code == 200 and "config.endpoint_url" in r.content.decode()
    assert list(r.context["adminform"].form.errors) == ["s3_endpoint_url"]
    with activate(whole_tenant(world.a)):
        assert not Source.objects.for_scope(whole_tenant(world.a)).exists()


@ADMIN_DB
def test_finding_4_the_admin_drops_credentials_when_the_address_changes(client, world, settings, hosts):
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    first, second = hosts
    client.force_login(staff(world, "admin"))
    r = client.post("/admin/kb/source/add/", _form(world, website_start_url=f"http://127.0.0.1:{first.port}/",
                                                   website_authorization=TOKEN))
    assert r.status_code == 302, r.content.decode()[:2000]
    scope = whole_tenant(world.a)
    with activate(scope):
        source = Source.objects.for_scope(scope).get(name="Intranet")
    assert source.has_secret
    change = f"/admin/kb/source/{source.pk}/change/"
    r = client.post(change, _form(world, website_start_url=f"http://127.0.0.1:{second.port}/"), follow=True)
    assert r.status_code == 200 and "stored credentials were removed" in r.content.decode(), r.content.decode()[:2000]
    with activate(scope):
        source.refresh_from_db()
    assert not source.has_secret
    r = client.post(change, _form(world, website_start_url=f"http://127.0.0.1:{first.port}/", website_authorization=TOKEN))
    assert r.status_code == 302
    with activate(scope):
        source.refresh_from_db()
    assert source.has_secret  # typed with the new address: kept


@pytest.mark.django_db
def test_a_host_granted_with_private_addresses_is_reachable_by_that_tenant_only(
        world, settings, hosts, django_capture_on_commit_callbacks):
    """The tenant's grants feed the outbound policy at create time and at connect time: a loopback host
    granted to tenant A with allow_private is created and synced; tenant B, without the grant, is refused
    the same URL with a 400 naming the field."""
    from tests.kb.sources.conftest import grant

    settings.SOURCES_ALLOW_PRIVATE_HOSTS = False
    server = hosts[0]
    server.routes["/"] = (200, {"Content-Type": "text/plain"}, b"Intranet page granted to tenant A.")
    url = f"http://127.0.0.1:{server.port}/"
    grant(world.a, "website_host", "127.0.0.1", allow_private=True)

    refused = world.client("b-admin").post("/api/v1/sources/", {"corpus": world.b_corpus.id, "name": "Probe", "kind": "website",
                                                               "config": {"start_url": url}, "schedule_minutes": 0}, format="json")
    assert refused.status_code == 400 and "config.start_url" in refused.content.decode(), refused.content

    created = post(world, {"name": "Intranet", "kind": "website", "config": {"start_url": url}})
    assert created.status_code == 201, created.content
    with django_capture_on_commit_callbacks(execute=True):
        assert world.client("a-admin").post(f"/api/v1/sources/{created.json()['id']}/sync/").status_code == 202
    synced = world.client("a-admin").get(f"/api/v1/sources/{created.json()['id']}/").json()["last_sync"]
    assert synced["status"] == "done", synced
    assert server.hits, "the granted host was never contacted"
