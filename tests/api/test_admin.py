"""The admin site: tenant admins see only their tenant; runs are read-only; playground uses the chosen scope."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agents.models import Run
from kb.models import Chunk, Document, IngestJob
from tenants.models import ApiKey, ApiKeyDepartment, Membership, MembershipDepartment
from tenants.principals import authenticate_key
from tenants.scope import activate
from tests.api.conftest import CANARY
from tests.factories import departments_of, make_membership, make_staff_user, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

# Staff users are made through the owner connection, as in production (the application role may not set
# is_staff): their rows are committed, so these tests are transactional.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])


def staff(world, role: str, tenant=None, departments=None):
    """A staff user with a `role` membership of `tenant` (A by default): all departments, or `departments`."""
    tenant = tenant or world.a
    user = make_staff_user(f"{role}-{tenant.slug}", "x" * 12)
    make_membership(user, tenant, role, all_departments=departments is None, departments=departments or ())
    return user


@pytest.fixture
def admin_client(client, world):
    client.force_login(staff(world, "admin"))
    return client


def _b_doc(world) -> Document:
    with activate(whole_tenant(world.b)):
        return Document.objects.for_scope(whole_tenant(world.b)).get()


def test_changelists_show_only_own_tenant(admin_client, world):
    for url in ["/admin/kb/corpus/", "/admin/kb/document/", "/admin/kb/chunk/", "/admin/kb/ingestjob/", "/admin/tenants/apikey/",
                "/admin/tenants/membership/", "/admin/tenants/department/", "/admin/tenants/tenant/", "/admin/agents/run/"]:
        r = admin_client.get(url)
        assert r.status_code == 200, url
        assert CANARY not in r.content.decode() and "Globex" not in r.content.decode(), url
    assert "Travel policy" in admin_client.get("/admin/kb/document/").content.decode()


def test_other_tenants_objects_are_not_reachable(admin_client, world):
    doc = _b_doc(world)
    with activate(whole_tenant(world.b)):
        chunk = Chunk.objects.for_scope(whole_tenant(world.b)).get()
    for url in [f"/admin/kb/corpus/{world.b_corpus.id}/change/", f"/admin/kb/document/{doc.id}/change/",
                f"/admin/kb/chunk/{chunk.id}/change/", f"/admin/kb/corpus/{world.b_corpus.id}/delete/"]:
        r = admin_client.get(url, follow=True)
        assert CANARY not in r.content.decode(), url
        assert "doesn’t exist" in r.content.decode() or r.status_code == 404, url


def test_admin_upload_names_its_jobs_and_the_list_follows_them_while_they_run(admin_client, world, tmp_path):
    """Issue 31: with a worker the documents are still pending after the redirect; the message names the
    jobs and the list reloads itself until nothing is pending. (Not eager; the broker is a socket that
    is not there, so the job stays queued, as it would until a worker takes it.)"""
    from api.project.celery import app as celery_app

    saved = {k: celery_app.conf[k] for k in ("task_always_eager", "broker_url")}
    celery_app.conf.update(task_always_eager=False, broker_url=f"redis+socket://{tmp_path}/absent.sock")
    try:
        r = admin_client.post("/admin/kb/document/upload/", {
            "corpus": world.shared.id, "files": [SimpleUploadedFile("queued.md", b"# Queued\n\nStill to ingest.\n")]},
            follow=True)
    finally:
        celery_app.conf.update(saved)
    with activate(whole_tenant(world.a)):
        doc = Document.objects.for_scope(whole_tenant(world.a)).get(source_name="queued.md")
        job = IngestJob.objects.for_scope(whole_tenant(world.a)).get(document=doc)
    assert doc.status == "pending"
    assert f"Ingestion jobs {job.pk} are queued" in " ".join(str(m) for m in r.context["messages"])
    assert '<meta http-equiv="refresh"' in r.content.decode()
    with activate(whole_tenant(world.a)):
        Document.objects.for_scope(whole_tenant(world.a)).filter(pk=doc.pk).update(status="ready")
    assert '<meta http-equiv="refresh"' not in admin_client.get("/admin/kb/document/").content.decode()


def test_upload_reingest_delete_from_the_admin(admin_client, world, django_capture_on_commit_callbacks):
    page = admin_client.get("/admin/kb/document/upload/")
    assert page.status_code == 200 and "globex" not in page.content.decode().lower()
    with django_capture_on_commit_callbacks(execute=True):
        r = admin_client.post("/admin/kb/document/upload/", {
            "corpus": world.shared.id, "metadata": json.dumps({"category": "hr"}),
            "files": [SimpleUploadedFile("leave.md", b"# Leave\n\nEmployees get 30 days of paid leave.\n")]})
    assert r.status_code == 302, (r.context["form"].errors, [str(m) for m in r.context["messages"]])
    with activate(whole_tenant(world.a)):
        doc = Document.objects.for_scope(whole_tenant(world.a)).get(source_name="leave.md")
    assert doc.status == "ready" and doc.metadata == {"category": "hr"}
    listing = admin_client.get("/admin/kb/document/").content.decode()
    assert "leave.md" in listing or "Leave" in listing
    assert "<progress" in listing
    with django_capture_on_commit_callbacks(execute=True):
        r = admin_client.post("/admin/kb/document/", {"action": "reingest", "_selected_action": [doc.id]})
    assert r.status_code == 302
    r = admin_client.post("/admin/kb/document/", {"action": "delete_documents", "_selected_action": [doc.id, _b_doc(world).id]})
    assert r.status_code == 302
    with activate(whole_tenant(world.a)):
        assert not Document.objects.for_scope(whole_tenant(world.a)).filter(pk=doc.pk).exists()
    with activate(whole_tenant(world.b)):
        assert Document.objects.for_scope(whole_tenant(world.b)).exists()  # the foreign id in the POST was ignored


def test_upload_rejects_foreign_corpus_and_bad_metadata(admin_client, world):
    r = admin_client.post("/admin/kb/document/upload/", {"corpus": world.b_corpus.id, "metadata": "[",
                                                         "files": [SimpleUploadedFile("x.md", b"# X\n\ny\n")]})
    assert r.status_code == 200
    errors = r.context["form"].errors
    assert "corpus" in errors and "metadata" in errors


def test_chunk_search_preview(admin_client, world):
    r = admin_client.get("/admin/kb/chunk/search/", {"q": "hotel per night", "mode": "keyword"})
    assert r.status_code == 200
    body = r.content.decode()
    assert "150 EUR" in body and CANARY not in body


def test_api_key_created_in_admin_shows_raw_key_once(admin_client, world):
    r = admin_client.post("/admin/tenants/apikey/add/", {"name": "integration", "role": "reader", "all_departments": "on"},
                          follow=True)
    assert r.status_code == 200
    text = r.content.decode()
    with activate(whole_tenant(world.a)):
        key = ApiKey.objects.get(name="integration")
    assert key.tenant_id == world.a.id and f"gk_{key.public_id}_" in text
    raw = text.split("id='raw-key'>")[1].split("<")[0] if "id='raw-key'>" in text else text.split('id="raw-key">')[1].split("<")[0]
    assert authenticate_key(raw)[0] == key
    assert raw not in admin_client.get(f"/admin/tenants/apikey/{key.id}/change/").content.decode()


def test_editor_manages_documents_but_not_keys_or_runs(client, world):
    client.force_login(staff(world, "editor"))
    assert client.get("/admin/kb/document/").status_code == 200
    assert client.get("/admin/tenants/apikey/").status_code == 403
    assert client.get("/admin/agents/run/").status_code == 403
    assert client.get("/admin/kb/corpus/add/").status_code == 403


def _ask(world, who="a-reader", question="What is the hotel limit per night?") -> dict:
    return world.client(who).post("/api/v1/ask/", {"question": question}, format="json").json()


def test_run_review_is_read_only_and_shows_citations(client, world):
    run = _ask(world)
    _ask(world, "b-reader", f"hotel limit {CANARY}?")
    client.force_login(staff(world, "auditor"))
    listing = client.get("/admin/agents/run/").content.decode()
    assert "hotel limit per night" in listing and CANARY not in listing
    detail = client.get(f"/admin/agents/run/{run['id']}/change/").content.decode()
    assert "Step timeline" in detail and "intact" in detail and run["principal"] in detail
    if run["citations"]:
        assert "verified" in detail and "Employees may book hotels" in detail
    assert client.get("/admin/agents/run/add/").status_code == 403
    assert client.post(f"/admin/agents/run/{run['id']}/delete/").status_code == 403
    assert client.post("/admin/agents/run/", {"action": "delete_selected", "_selected_action": [run["id"]]}).status_code != 302
    with activate(whole_tenant(world.b)):
        b_run = Run.objects.for_scope(whole_tenant(world.b)).get()
    assert CANARY not in client.get(f"/admin/agents/run/{b_run.id}/change/", follow=True).content.decode()
    for f in ["?outcome=" + run["outcome"], "?unverified=no", "?principal=" + run["principal"], "?created_at__gte=2000-01-01",
              f"?department={world.sales.id}"]:
        assert client.get("/admin/agents/run/" + f).status_code == 200, f


def test_run_export_csv_and_jsonl_follow_filters(client, world):
    run = _ask(world)
    _ask(world, "b-reader", f"hotel limit {CANARY}?")
    client.force_login(staff(world, "auditor"))
    csv_body = client.get("/admin/agents/run/export.csv").content.decode()
    rows = list(csv.reader(io.StringIO(csv_body)))
    assert rows[0][:3] == ["id", "tenant_id", "seq"] and len(rows) == 2 and rows[1][0] == str(run["id"]) and CANARY not in csv_body
    lines = client.get("/admin/agents/run/export.jsonl").content.decode().splitlines()
    row = json.loads(lines[0])
    assert len(lines) == 1 and row["id"] == run["id"] and row["steps"] and "citations" in row
    assert len(list(csv.reader(io.StringIO(client.get("/admin/agents/run/export.csv?outcome=failed").content.decode())))) == 1


def test_playground_runs_with_the_chosen_members_scope(admin_client, world):
    sales_user = get_user_model().objects.create(username="sam")
    m = make_membership(sales_user, world.a, "reader", departments=[world.sales])
    page = admin_client.get("/admin/agents/run/ask/")
    assert page.status_code == 200 and "globex" not in page.content.decode().lower()
    r = admin_client.post("/admin/agents/run/ask/", {"act_as": f"member:{m.id}", "strategy": "auto",
                                                     "question": "How often do on-call engineers rotate?"})
    assert r.status_code == 200
    run = r.context["run"]
    assert run.scope["department_ids"] == [world.sales.id] and not run.scope["all_departments"]
    assert run.principal == f"user:{sales_user.id} via admin:user:{r.wsgi_request.user.id}"
    acted = re.search(r'<span id="acted-scope">(.*?)</span>', r.content.decode(), re.S).group(1)
    assert f"department ids: {world.sales.id}" in acted and "{" not in acted, acted  # words, not a dict's repr
    assert "rotate weekly" not in run.answer  # the engineering runbook is outside Sam's scope
    with activate(whole_tenant(world.b)):
        b_key = ApiKey.objects.filter(tenant=world.b).first()
    r = admin_client.post("/admin/agents/run/ask/", {"act_as": f"key:{b_key.id}", "strategy": "auto", "question": "hotel?"})
    assert r.context["form"].errors


def test_superuser_sees_every_tenant(client, world):
    """Superusers read through the owner alias, so the data must be committed (transactional test)."""
    su = make_staff_user("root", "x" * 12, superuser=True, email="r@x.test")
    client.force_login(su)
    body = client.get("/admin/kb/corpus/").content.decode()
    assert CANARY in body and "shared" in body
    assert CANARY in client.get(f"/admin/kb/corpus/{world.b_corpus.id}/change/").content.decode()


def test_staff_without_membership_sees_nothing(client, world):
    user = make_staff_user("lost", "x" * 12)
    client.force_login(user)
    assert client.get("/admin/kb/corpus/").status_code == 403
    assert "Corpora" not in client.get("/admin/").content.decode()


def test_superuser_cannot_give_a_key_another_tenants_department(client, world):
    su = make_staff_user("root2", "x" * 12, superuser=True, email="r2@x.test")
    client.force_login(su)
    b_dept = departments_of(world.b)[0]
    r = client.post("/admin/tenants/apikey/add/", {"tenant": world.a.id, "name": "mixed", "role": "reader", "departments": [b_dept.id]})
    assert r.status_code == 200 and r.context["adminform"].form.errors == {
        "departments": ["departments must belong to the same tenant"]}
    assert not ApiKey.objects.using("owner").filter(tenant_id__in=[world.a.id, world.b.id], name="mixed").exists()


def test_department_widgets_save_through_the_link_models(admin_client, world):
    """Keys' and members' departments have link models of their own (tenants 0008): the admin still shows the
    widget, and what it saves carries the tenant."""
    first, second = departments_of(world.a)[:2]
    member = staff(world, "reader", departments=[first])
    membership = Membership.objects.using("owner").get(tenant_id=world.a.id, user_id=member.id)
    r = admin_client.post(f"/admin/tenants/membership/{membership.pk}/change/", {"role": "reader", "departments": [second.id]})
    assert r.status_code == 302, r.content.decode()[:2000]
    assert list(MembershipDepartment.objects.using("owner").filter(tenant_id=world.a.id, membership=membership).values_list(
        "tenant_id", "department_id")) == [(world.a.id, second.id)]
    # An operator (owner connection, no tenant activated by the admin) too: the links take the member's tenant.
    operator = Client()
    operator.force_login(make_staff_user("root3", "x" * 12, superuser=True, email="r3@x.test"))
    r = operator.post(f"/admin/tenants/membership/{membership.pk}/change/", {"role": "reader", "departments": [first.id, second.id]})
    assert r.status_code == 302, r.content.decode()[:2000]
    assert sorted(MembershipDepartment.objects.using("owner").filter(tenant_id=world.a.id, membership=membership).values_list(
        "tenant_id", "department_id")) == [(world.a.id, first.id), (world.a.id, second.id)]
    r = operator.post("/admin/tenants/apikey/add/", {"tenant": world.a.id, "name": "operator's", "role": "reader",
                                                      "departments": [first.id]})
    assert r.status_code == 302, r.content.decode()[:2000]
    assert list(ApiKeyDepartment.objects.using("owner").filter(tenant_id=world.a.id, apikey__name="operator's").values_list(
        "tenant_id", "department_id")) == [(world.a.id, first.id)]
    assert 'name="departments"' in admin_client.get("/admin/tenants/apikey/add/").content.decode()
    r = admin_client.post("/admin/tenants/apikey/add/", {"name": "linked", "role": "reader", "departments": [first.id, second.id]})
    assert r.status_code == 302, r.content.decode()[:2000]
    key = ApiKey.objects.using("owner").get(tenant_id=world.a.id, name="linked")
    links = ApiKeyDepartment.objects.using("owner").filter(tenant_id=world.a.id, apikey=key)
    assert sorted(links.values_list("tenant_id", "department_id")) == sorted([(world.a.id, first.id), (world.a.id, second.id)])


def test_staff_with_two_tenants_switches_between_them(client, world):
    user = staff(world, "admin")
    make_membership(user, world.b, "editor", all_departments=True)
    client.force_login(user)
    # Several tenants and none chosen: the admin shows the choice, and nothing of either tenant.
    index = client.get("/admin/").content.decode()
    assert f"/admin/tenants/tenant/switch/{world.a.slug}/" in index and f"/admin/tenants/tenant/switch/{world.b.slug}/" in index
    assert client.get("/admin/kb/corpus/").status_code == 403
    client.get(f"/admin/tenants/tenant/switch/{world.a.slug}/")
    assert "shared" in client.get("/admin/kb/corpus/").content.decode()
    assert CANARY not in client.get("/admin/kb/corpus/").content.decode()
    client.get(f"/admin/tenants/tenant/switch/{world.b.slug}/")
    assert CANARY in client.get("/admin/kb/corpus/").content.decode()
    assert client.get("/admin/tenants/apikey/").status_code == 403  # an editor in B
    client.get("/admin/tenants/tenant/switch/nowhere/")
    assert CANARY in client.get("/admin/kb/corpus/").content.decode()


def test_verify_chain_and_chunk_browser(client, world):
    _ask(world)
    client.force_login(staff(world, "admin"))
    r = client.get("/admin/agents/run/verify-chain/", follow=True)
    assert f"Tenant {world.a.id}: chain intact (1 runs)." in [str(m) for m in r.context["messages"]]
    with activate(whole_tenant(world.a)):
        doc = Document.objects.for_scope(whole_tenant(world.a)).get(title="Travel policy")
    body = client.get(f"/admin/kb/chunk/?document={doc.id}").content.decode()
    assert "Employees may book hotels" in body and "On-call engineers" not in body and "Search preview" in body
    b_doc = _b_doc(world)
    assert CANARY not in client.get(f"/admin/kb/chunk/?document={b_doc.id}").content.decode()


def test_department_admin_cannot_change_tenant_wide_rows_in_the_admin(client, world):
    user = staff(world, "admin", departments=[world.sales])
    client.force_login(user)
    with activate(whole_tenant(world.a)):
        shared_doc = Document.objects.for_scope(whole_tenant(world.a)).get(corpus=world.shared)
    # Readable, not changeable: the change form is read-only and a forged POST is refused.
    page = client.get(f"/admin/kb/corpus/{world.shared.id}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    r = client.post(f"/admin/kb/corpus/{world.shared.id}/change/", {"name": "renamed by sales", "description": "x",
                                                                      "chunk_target_tokens": 240, "chunk_overlap_tokens": 30})
    assert r.status_code == 403
    assert client.post(f"/admin/kb/corpus/{world.shared.id}/delete/", {"post": "yes"}).status_code == 403
    r = client.post("/admin/kb/document/", {"action": "delete_documents", "_selected_action": [shared_doc.id]}, follow=True)
    assert "tenant-wide document" in r.content.decode()
    with activate(whole_tenant(world.a)):
        assert Document.objects.for_scope(whole_tenant(world.a)).filter(pk=shared_doc.pk).exists()
        assert world.shared.__class__.objects.for_scope(whole_tenant(world.a)).get(pk=world.shared.id).name == "shared"
    # Its own department's corpus is its to change.
    assert 'name="_save"' in client.get(f"/admin/kb/corpus/{world.sales_corpus.id}/change/").content.decode()


def test_admin_sign_in_locks_out_an_address_after_failed_attempts(client, world, settings, fixed_lockout_window):
    from django.core.cache import cache

    settings.AUTH_FAILURES_PER_IP = 2
    settings.RATE_LIMIT_REDIS_URL = ""
    cache.clear()
    staff(world, "admin")  # username admin-<slug>, password "x" * 12
    username = f"admin-{world.a.slug}"
    attempt = lambda password, address: client.post("/admin/login/", {"username": username, "password": password},  # noqa: E731
                                                    REMOTE_ADDR=address)
    assert attempt("wrong", "10.9.9.1").status_code == 200
    assert attempt("wrong again", "10.9.9.1").status_code == 200
    refused = attempt("x" * 12, "10.9.9.1")  # the right password, from the locked-out address
    assert refused.status_code == 200 and "Too many failed sign-ins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    assert attempt("x" * 12, "10.9.9.2").status_code == 302  # another address signs in


def test_reembed_corpora_from_the_admin(admin_client, world, django_capture_on_commit_callbacks):
    from kb.models import Corpus, IngestJob

    url = "/admin/kb/corpus/"
    page = admin_client.post(url, {"action": "reembed", "_selected_action": [world.shared.id]})
    assert page.status_code == 200 and 'name="embedding_dim"' in page.content.decode()  # the model is asked for first
    bad = admin_client.post(url, {"action": "reembed", "_selected_action": [world.shared.id], "apply": "1",
                                  "embedding_model": "no-such-model", "embedding_dim": 8})
    assert bad.status_code == 200 and "unknown embedding model" in bad.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        r = admin_client.post(url, {"action": "reembed", "_selected_action": [world.shared.id, world.b_corpus.id], "apply": "1",
                                    "embedding_model": "hash", "embedding_dim": 16}, follow=True)
    assert r.status_code == 200 and "re-embedding into hash:16" in r.content.decode()
    with activate(whole_tenant(world.a)):
        corpus = Corpus.objects.for_scope(whole_tenant(world.a)).get(pk=world.shared.id)
        assert (corpus.embedding_model, corpus.embedding_dim) == ("hash", 16)
        assert IngestJob.objects.for_scope(whole_tenant(world.a)).filter(corpus=corpus, kind="reembed", status="done").exists()
    with activate(whole_tenant(world.b)):  # the foreign id in the POST was ignored
        assert Corpus.objects.for_scope(whole_tenant(world.b)).get(pk=world.b_corpus.id).embedding_dim != 16


def test_the_playground_shows_each_providers_probed_capabilities(admin_client, world, settings):
    """What /healthz reports is in the admin too: here a server whose chat template drops the system
    message and the tool declarations (tests.fakes.fake_openai), probed as at start-up."""
    from agents.providers import probe
    from agents.providers.openai_compat import OpenAICompatProvider
    from tests.fakes.fake_openai import FakeOpenAI, reply

    with FakeOpenAI([], when_exhausted=reply('{"ok": true, "n": 3}'), drop_system=True, ignore_tools=True) as fake:
        settings.OPENAI_COMPAT_BASE_URL, settings.OPENAI_COMPAT_MODEL = fake.base_url, "tiny"
        probe(OpenAICompatProvider(base_url=fake.base_url, model="tiny", backoff_s=0))
        page = admin_client.get("/admin/agents/run/ask/").content.decode()
    table = page[page.index('id="providers"'):page.index("</table>", page.index('id="providers"'))]
    rows = {cells[0].split()[0]: cells for cells in (re.findall(r"<td>(.*?)</td>", r) for r in table.split("<tr>")[2:])}
    assert rows["offline"][2:6] == ["declared", "yes", "yes", "yes"], rows
    assert rows["openai"][1:6] == ["tiny", "probed", "no", "no", "yes"], rows  # the system message and tools dropped
    assert float(rows["openai"][6]) > 0, rows  # its measured prompt speed


def test_audit_review_shows_the_cited_text_and_version_after_the_document_changed(client, world):
    from tests.api.conftest import ingest

    run = world.client("a-reader").post("/api/v1/ask/", {"question": "What is the hotel limit per night?", "strategy": "classic"},
                                        format="json").json()
    assert run["citations"], run
    ingest(world.shared, "Travel policy", "Employees may book hotels up to 210 EUR per night.")
    client.force_login(staff(world, "auditor"))
    detail = client.get(f"/admin/agents/run/{run['id']}/change/").content.decode()
    cell = detail[detail.index('class="evidence"'):]
    assert "version 1" in cell and "changed (now version 2) since" in cell and "150 EUR" in cell, cell[:800]


def test_admin_pages_read_as_their_users_expect(admin_client, world):
    """Issue 32's walkthrough: the playground asks as the signed-in admin by default; the document list
    names files and says why one failed; a finished job reads "done" once; keys are "API keys"; chunks
    are not "8#4"."""
    import re as _re

    page = admin_client.get("/admin/agents/run/ask/").content.decode()
    first = _re.search(r'<select name="act_as"[^>]*>\s*<option value="[^"]*"[^>]*>([^<]*)</option>', page)
    assert first and "(you)" in first.group(1), first and first.group(1)
    from kb.ingest import upload_document
    from tests.factories import whole_tenant as _whole

    upload_document(scope=_whole(world.a), corpus=world.shared, filename="broken.pdf", data=b"%PDF-1.4 not really a pdf")
    listing = admin_client.get("/admin/kb/document/?o=-9").content.decode()
    text = " ".join(_re.sub(r"<[^>]+>", " ", listing).split())
    assert "done done" not in text and "why it failed" in text.lower() and "Django site admin" not in text
    row = next(r for r in listing.split("<tr") if "broken.pdf" in r)
    assert "failed" in row and 'class="field-failure">-<' not in row, row
    index = admin_client.get("/admin/").content.decode()
    assert "API keys" in index and "Api keys" not in index
    with activate(whole_tenant(world.a)):
        chunk = Chunk.objects.for_scope(whole_tenant(world.a)).first()
    assert _re.fullmatch(r"chunk \d+ \(part \d+ of document \d+\)", str(chunk))


def test_run_review_shows_scope_arguments_and_filters_as_words(client, world):
    """The trace's stored JSON (enforced scope, step arguments, effective filter) is shown through the
    `readable` filter: "role: reader · all departments: no", never a Python dict's repr."""
    run = world.client("a-sales-reader").post("/api/v1/ask/", {"question": "What is the hotel limit per night?",
                                                               "strategy": "classic"}, format="json").json()
    client.force_login(staff(world, "auditor"))
    detail = client.get(f"/admin/agents/run/{run['id']}/change/").content.decode()
    scope = re.search(r'<span id="enforced-scope">(.*?)</span>', detail, re.S).group(1)
    assert "role: reader" in scope and "all departments: no" in scope and f"department ids: {world.sales.id}" in scope, scope
    # The third cell of each step row: its arguments, and the filter its search applied.
    arguments = " ".join(re.findall(r'<tr class="step">\s*<td>.*?</td>\s*<td>.*?</td>\s*<td>(.*?)</td>', detail, re.S))
    assert "query: What is the hotel limit per night?" in arguments and "<small>filter: " in arguments, arguments
    assert "scope: (role: reader;" in arguments  # a nested object reads as words in brackets
    for raw in ("{", "[&#x27;", "&quot;", "True", "False", "None"):  # a dict's or list's repr, or JSON, escaped or not
        assert raw not in scope and raw not in arguments, raw


def test_view_site_leads_to_the_chat_page(admin_client, world):
    """The admin's "View site" link is "/", and "/" is the chat page of the signed-in user's tenant."""
    index = admin_client.get("/admin/").content.decode()
    href = re.search(r'<a href="([^"]*)">View site</a>', index)
    assert href and href.group(1) == "/", href
    chat = admin_client.get(href.group(1))
    assert chat.status_code == 200 and [t.name for t in chat.templates][0] == "chat/index.html"
    html = chat.content.decode()
    assert f"<h1>Ask {world.a.name}</h1>" in html and 'id="question"' in html and 'aria-label="Conversations"' in html
