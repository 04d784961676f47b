"""Issue 52, "Admin without JSON": the source form has a field per declared setting of each kind, departments
picked by name (the admin's own tenant and grantable ones only), a connection test before save (the error on
the setting at fault, nothing saved), and a first sync on create; sync summaries come with a legend; the
search preview is tables, not Python reprs."""

from __future__ import annotations

import pytest

from kb.models import Source, SourceSync
from kb.sources.kinds import CONNECTORS, kind_fields
from tenants.scope import activate
from tests.api.test_admin import staff
from tests.factories import department, make_staff_user, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.sources.conftest import grant

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])
ADD = "/admin/kb/source/add/"


@pytest.fixture
def share(settings, tmp_path, world):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    grant(world.a, "folder", str(tmp_path))
    (tmp_path / "share" / "sales").mkdir(parents=True)
    (tmp_path / "share" / "canteen.md").write_text("The canteen opens at 11:30 and serves soup on Fridays.")
    (tmp_path / "share" / "sales" / "pricing.md").write_text("# Pricing\n\nThe discount ceiling is 20 percent.")
    return tmp_path / "share"


def form(world, **fields) -> dict:
    return {"name": "Share", "corpus": world.shared.id, "kind": "folder", "schedule_minutes": 60, **fields}


def sources(tenant) -> list[Source]:
    with activate(whole_tenant(tenant)):
        return list(Source.objects.for_scope(whole_tenant(tenant)).all())


def test_the_add_form_has_a_field_per_declared_setting_and_no_json(client, world):
    client.force_login(staff(world, "admin"))
    page = client.get(ADD).content.decode()
    for kind in CONNECTORS:
        for decl in kind_fields(kind):
            assert f'id="id_{kind}_{decl.name}"' in page, (kind, decl.name)
    assert 'name="config"' not in page and 'name="department_rules"' not in page and 'name="credentials"' not in page
    # departments by name, the admin's own tenant only
    assert ">Sales</option>" in page and ">Engineering</option>" in page


def test_a_valid_folder_source_is_tested_saved_with_rules_by_name_and_synced_at_once(client, world, share):
    client.force_login(staff(world, "admin"))
    r = client.post(ADD, form(world, folder_path=str(share), rule_prefix_0="sales/", rule_department_0=str(world.sales.pk),
                              rule_prefix_1="", rule_department_1="tenant"), follow=True)
    assert r.status_code == 200 and not (r.context.get("adminform") and r.context["adminform"].form.errors)
    page = r.content.decode()
    assert "Connection tested: canteen.md, sales/pricing.md" in page and "first sync is queued" in page
    [source] = sources(world.a)
    assert source.config == {"path": str(share), "include_hidden": False}
    assert source.department_rules == [{"prefix": "sales/", "department": world.sales.pk}, {"prefix": "", "department": None}]
    assert source.next_sync_at is not None  # due again after schedule_minutes
    with activate(whole_tenant(world.a)):
        [sync] = SourceSync.objects.for_scope(whole_tenant(world.a)).filter(source=source)
    assert sync.trigger == "manual" and sync.status == "done" and sync.added == 2  # no broker in tests: ran after commit


@pytest.mark.parametrize(("fields", "at_fault", "says"), [
    ({"folder_path": "/etc"}, "folder_path", "not under a folder"),
    ({"folder_path": ""}, "folder_path", "path is required"),
    ({"folder_path": "{missing}"}, "folder_path", "cannot be opened"),  # checks pass; the connection test fails
])
def test_an_invalid_config_shows_the_error_on_its_field_and_saves_nothing(client, world, share, fields, at_fault, says):
    client.force_login(staff(world, "admin"))
    fields = {k: v.format(missing=share / "missing") for k, v in fields.items()}
    r = client.post(ADD, form(world, **fields))
    assert r.status_code == 200
    errors = r.context["adminform"].form.errors
    assert list(errors) == [at_fault] and says in errors[at_fault][0], errors
    assert sources(world.a) == []


def test_an_unreachable_bucket_is_blamed_on_its_endpoint_and_not_saved(client, world, share):
    client.force_login(staff(world, "admin"))
    r = client.post(ADD, form(world, kind="s3", name="Bucket", s3_bucket="b", s3_endpoint_url="http://127.0.0.1:9",
                              s3_access_key_id="AKIA", s3_secret_access_key="s3-secret-canary-77"))
    assert r.status_code == 200
    errors = r.context["adminform"].form.errors
    assert list(errors) == ["s3_endpoint_url"], errors
    assert "s3-secret-canary-77" not in r.content.decode()
    assert sources(world.a) == []


def test_the_test_connection_button_tests_and_saves_nothing(client, world, share):
    client.force_login(staff(world, "admin"))
    page = client.get(ADD).content.decode()
    assert 'name="_test_connection" value="Test connection"' in page
    r = client.post(ADD, form(world, folder_path=str(share), _test_connection="Test connection"))
    assert r.status_code == 200 and not r.context["adminform"].form.errors
    page = r.content.decode()
    assert "Connection tested: canteen.md, sales/pricing.md. Nothing is saved yet" in page and "errornote" not in page
    r = client.post(ADD, form(world, folder_path=str(share / "missing"), _test_connection="Test connection"))
    assert list(r.context["adminform"].form.errors) == ["folder_path"]
    assert sources(world.a) == []
    with activate(whole_tenant(world.a)):
        assert not SourceSync.objects.for_scope(whole_tenant(world.a)).exists()


def test_half_the_credentials_is_an_error_on_the_credentials(client, world, share):
    client.force_login(staff(world, "admin"))
    r = client.post(ADD, form(world, kind="s3", name="Bucket", s3_bucket="b", s3_access_key_id="AKIA"))
    errors = r.context["adminform"].form.errors
    assert list(errors) == ["s3_access_key_id"] and "both" in errors["s3_access_key_id"][0], errors
    assert sources(world.a) == []


def test_another_tenants_department_is_refused_by_id_and_by_name(client, world, share):
    theirs = department(world.b, "Sales")  # Globex has a "Sales" too
    client.force_login(staff(world, "admin"))
    assert f'<option value="{theirs.pk}">Sales</option>' not in client.get(ADD).content.decode()
    for value in (str(theirs.pk), "Sales", "Globex/Sales"):  # a name is never a value: the choices are this tenant's ids
        r = client.post(ADD, form(world, folder_path=str(share), rule_prefix_0="x/", rule_department_0=value))
        assert r.status_code == 200
        assert list(r.context["adminform"].form.errors) == ["rule_department_0"], value
    assert sources(world.a) == []


def test_a_department_limited_admin_is_offered_its_own_departments_only(client, world, share):
    client.force_login(staff(world, "admin", departments=[world.sales]))
    page = client.get(ADD).content.decode()
    assert ">Sales</option>" in page and ">Engineering</option>" not in page
    r = client.post(ADD, form(world, corpus=world.sales_corpus.id, folder_path=str(share), rule_prefix_0="x/",
                              rule_department_0=str(world.eng.pk)))
    assert r.status_code == 200 and "rule_department_0" in r.context["adminform"].form.errors
    assert sources(world.a) == []


def test_a_forged_tenant_field_is_ignored(client, world, share):
    client.force_login(staff(world, "admin"))
    r = client.post(ADD, form(world, folder_path=str(share), tenant=world.b.pk, tenant_id=world.b.pk))
    assert r.status_code == 302, r.content.decode()[:2000]
    assert [s.tenant_id for s in sources(world.a)] == [world.a.pk] and sources(world.b) == []


def test_editing_shows_the_kinds_settings_and_the_rules_by_name(client, world, share):
    client.force_login(staff(world, "admin"))
    client.post(ADD, form(world, folder_path=str(share), rule_prefix_0="sales/", rule_department_0=str(world.sales.pk)))
    [source] = sources(world.a)
    page = client.get(f"/admin/kb/source/{source.pk}/change/").content.decode()
    assert f'value="{share}"' in page and 'id="id_s3_bucket"' not in page
    assert f'<option value="{world.sales.pk}" selected>Sales</option>' in page
    r = client.post(f"/admin/kb/source/{source.pk}/change/", {
        "name": "Share", "schedule_minutes": 60, "folder_path": str(share), "folder_include_hidden": "on",
        "rule_prefix_0": "sales/", "rule_department_0": str(world.eng.pk)})
    assert r.status_code == 302, r.content.decode()[:2000]
    [source] = sources(world.a)
    assert source.config["include_hidden"] is True
    assert source.department_rules == [{"prefix": "sales/", "department": world.eng.pk}]


def test_a_superuser_adds_a_source_for_the_corpus_tenant_and_its_departments_only(client, world, share):
    client.force_login(make_staff_user("root", "x" * 12, superuser=True))
    theirs = department(world.b, "Sales")
    assert f'<option value="{theirs.pk}">' in client.get(ADD).content.decode()  # an operator sees every tenant's
    r = client.post(ADD, form(world, folder_path=str(share), rule_prefix_0="x/", rule_department_0=str(theirs.pk)))
    assert r.status_code == 200 and "rule_department_0" in r.context["adminform"].form.errors  # not the corpus's tenant
    r = client.post(ADD, form(world, folder_path=str(share), rule_prefix_0="x/", rule_department_0=str(world.sales.pk)))
    assert r.status_code == 302, r.content.decode()[:2000]
    assert [(s.tenant_id, s.department_rules) for s in sources(world.a)] == [
        (world.a.pk, [{"prefix": "x/", "department": world.sales.pk}])]


def test_sync_summaries_come_with_a_legend(client, world, share):
    client.force_login(staff(world, "admin"))
    client.post(ADD, form(world, folder_path=str(share)))
    [source] = sources(world.a)
    for url in ("/admin/kb/source/", f"/admin/kb/source/{source.pk}/change/"):
        page = client.get(url).content.decode()
        assert 'id="sync-legend"' in page, url
        assert "<b>↔</b> moved" in page and "<b>!</b> failed" in page, url
    listing = client.get("/admin/kb/source/").content.decode()
    assert 'class="sync-summary" title="+ added: new items ingested' in listing and "done: +2 ~0 ↔0 -0 !0" in listing


def test_the_search_preview_is_tables_not_python_reprs(client, world):
    client.force_login(staff(world, "admin"))
    r = client.get("/admin/kb/chunk/search/", {"q": "hotel per night", "mode": "keyword"})
    page = r.content.decode()
    assert r.status_code == 200 and "<th>rank</th><th>document</th><th>locator</th><th>score</th><th>text</th>" in page
    assert "<td>1</td><td>Travel policy" in page and 'id="search-details"' in page
    assert "{'" not in page and "['" not in page and "&#x27;" not in page  # no dict or list reprs
