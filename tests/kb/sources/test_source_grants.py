"""Source grants (kb.sources.grants): a folder source reads only under its tenant's folder grants, never
another tenant's (issue 47, finding 1); host grants narrow website and S3 sources; a revoked grant fails
the sync and removes nothing; the database refuses overlapping folder grants on any connection."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction

from kb.sources.grants import GrantRefused, check_granted, granted_private_hosts
from kb.sources.models import SourceGrant
from kb.sources.services import source_create, source_update
from tenants.db_wall import grant_statements
from tenants.scope import NotAllowed, Scope, activate
from tests.factories import make_tenant, whole_tenant
from tests.kb.sources.conftest import corpus_state, grant, items, revoke

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(world, tmp_path):
    """Tenant A (the world's Acme) granted <tmp>/a only, tenant B (Globex) granted <tmp>/b; a file in each."""
    revoke(world["tenant"], "folder", str(tmp_path))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.md").write_text(f"# {name}\n\nThe secret of tenant {name.upper()} is kumquat-{name}.\n")
    grant(world["tenant"], "folder", str(tmp_path / "a"))
    b = make_tenant("Globex")
    grant(b, "folder", str(tmp_path / "b"))
    scope_b = whole_tenant(b)
    from kb.models import Corpus

    with activate(scope_b):
        corpus_b = Corpus.objects.create(tenant=b, name="Globex docs")
    return {**world, "b": b, "scope_b": scope_b, "corpus_b": corpus_b}


def _create(scope, corpus, path: str, name: str = "Share"):
    return source_create(scope=scope, corpus=corpus, name=name, kind="folder", config={"path": path})


def test_a_tenant_cannot_add_a_folder_another_tenant_is_granted_or_one_outside_its_grants(two, tmp_path):
    for path in (tmp_path / "a", tmp_path / "a" / "sub", tmp_path, tmp_path / "c", tmp_path / "b" / ".." / "a"):
        with pytest.raises(NotAllowed, match="config.path: not under a folder granted to this tenant") as refused:
            _create(two["scope_b"], two["corpus_b"], str(path))
        assert refused.value.field == "config"
    with activate(two["scope_b"]):
        from kb.models import Source

        assert not Source.objects.for_scope(two["scope_b"]).exists()
    assert _create(two["scope_b"], two["corpus_b"], str(tmp_path / "b")).config["path"] == str(tmp_path / "b")


def test_a_symlink_into_another_tenants_folder_is_judged_by_where_it_leads(two, tmp_path):
    (tmp_path / "b" / "to-a").symlink_to(tmp_path / "a")
    with pytest.raises(NotAllowed, match="config.path: not under a folder granted"):
        _create(two["scope_b"], two["corpus_b"], str(tmp_path / "b" / "to-a"))


def test_a_tenant_with_no_folder_grant_is_told_so(world, tmp_path):
    revoke(world["tenant"], "folder", str(tmp_path))
    with pytest.raises(NotAllowed, match="no folder is granted to this tenant"):
        _create(world["scope"], world["corpus"], str(tmp_path))


def test_moving_a_source_into_another_tenants_folder_is_refused(two, tmp_path):
    source = _create(two["scope_b"], two["corpus_b"], str(tmp_path / "b"))
    with pytest.raises(NotAllowed, match="config.path"):
        source_update(scope=two["scope_b"], source=source, config={"path": str(tmp_path / "a")})


def test_a_revoked_grant_fails_the_next_sync_and_removes_nothing(world, tmp_path, sync_now):
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "leave.md").write_text("# Leave\n\nParental leave is sixteen weeks.\n")
    source = _create(world["scope"], world["corpus"], str(tmp_path / "share"))
    assert sync_now(world["scope"], source).added == 1
    revoke(world["tenant"], "folder", str(tmp_path))
    failed = sync_now(world["scope"], source)
    assert failed.status == "failed" and failed.error.startswith("config.path: no folder is granted to this tenant")
    assert set(corpus_state(world["scope"], world["corpus"])) == {"leave.md"}
    assert items(world["scope"], source)["leave.md"].state == "present"


def test_overlapping_folder_grants_are_refused_by_the_service_and_by_the_database(two, tmp_path):
    b = two["b"]
    for path in (tmp_path / "a", tmp_path / "a" / "inner", tmp_path):
        with pytest.raises(GrantRefused, match="overlaps|granted to tenant"):
            grant(b, "folder", str(path))
    # Written behind the service's back, by a writer allowed to write grants (here the application role with a
    # grant proof): the disjointness trigger refuses it on any connection.
    with pytest.raises(IntegrityError, match="overlaps"), transaction.atomic(), activate(Scope.system(b.id)):
        with connection.cursor() as cur:
            cur.execute(grant_statements(b.id))
        SourceGrant.objects.create(tenant=b, kind="folder", value=str(tmp_path / "a" / "deeper"))
    with pytest.raises(GrantRefused, match="SOURCES_FOLDER_ROOTS"):
        grant(b, "folder", "/etc")


def test_the_application_role_cannot_write_grants_not_even_its_own_tenants(two, tmp_path):
    """Grants are an operator's act: SQL the application role runs (written wrong or injected) cannot grant its
    tenant a folder no other tenant holds, widen a grant, or take one away; the owner connection can."""
    a, b = two["tenant"], two["b"]
    free = tmp_path / "unclaimed"
    free.mkdir()
    with pytest.raises(DatabaseError, match="written by operators"), transaction.atomic(), activate(Scope.system(b.id)):
        SourceGrant.objects.create(tenant=b, kind="folder", value=str(free))
    with activate(Scope.system(a.id)):
        own = SourceGrant.objects.for_scope(Scope.system(a.id)).get(kind="folder")
    for change in ({"value": "/"}, {"allow_private": True}):
        with pytest.raises(DatabaseError, match="written by operators"), transaction.atomic(), activate(Scope.system(a.id)):
            SourceGrant.objects.for_scope(Scope.system(a.id)).filter(pk=own.pk).update(**change)
    with pytest.raises(DatabaseError, match="written by operators"), transaction.atomic(), activate(Scope.system(a.id)):
        SourceGrant.objects.for_scope(Scope.system(a.id)).filter(pk=own.pk).delete()
    # A grant proof for one tenant does not write another tenant's grants.
    with pytest.raises(DatabaseError, match="written by operators"), transaction.atomic(), activate(Scope.system(b.id)):
        with connection.cursor() as cur:
            cur.execute(grant_statements(a.id))
        SourceGrant.objects.create(tenant=b, kind="folder", value=str(free))
    with activate(Scope.system(a.id)):
        assert SourceGrant.objects.for_scope(Scope.system(a.id)).get(pk=own.pk).value == own.value


def test_host_grants_narrow_website_and_s3_sources(world):
    tenant, scope = world["tenant"], world["scope"]
    check_granted(tenant.id, "website", {"start_url": "https://anything.example/"})  # no host grant: any host
    grant(tenant, "website_host", "https://Intranet.Acme.example/", allow_private=True)
    grant(tenant, "s3_endpoint", "minio.acme.example:9000")
    check_granted(tenant.id, "website", {"start_url": "https://intranet.acme.example:8443/wiki"})
    check_granted(tenant.id, "s3", {"endpoint_url": "http://minio.acme.example:9000"})
    with pytest.raises(NotAllowed, match="config.start_url: .*intranet.acme.example") as refused:
        source_create(scope=scope, corpus=world["corpus"], name="Web", kind="website",
                      config={"start_url": "http://127.0.0.1:9/"})
    assert refused.value.field == "config"
    for endpoint in ("http://127.0.0.1:9", "http://minio.acme.example:9001", ""):
        with pytest.raises(NotAllowed, match="config.endpoint_url"):
            source_create(scope=scope, corpus=world["corpus"], name="S3", kind="s3",
                          config={"bucket": "b", "endpoint_url": endpoint})
    assert granted_private_hosts(tenant.id, "website_host") == frozenset({"intranet.acme.example"})
    assert granted_private_hosts(tenant.id, "s3_endpoint") == frozenset()
    other = make_tenant("Other")
    assert granted_private_hosts(other.id, "website_host") == frozenset()  # another tenant's grants are not seen
