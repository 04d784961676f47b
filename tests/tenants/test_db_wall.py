"""The database wall (issue 47, finding 8): SQL run as the application role cannot name the tenant, or the
user, whose rows it reads. Before it, `set_config('app.tenant_id', '<another tenant>', true)` read that
tenant's key hashes and document titles, and `grounded_user_tenants(<any user>)` listed anyone's memberships.

Probes are raw SQL on the application role's connection ("default"), each in a savepoint, so neither the ORM
nor the scoped managers are in the way: only PostgreSQL stands between the tenants."""

from __future__ import annotations

import secrets
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings

from tenants import db_wall
from tenants.models import ApiKey
from tests.factories import make_chunk, make_corpus, make_membership, make_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.scratch_database import migrate_to, scratch_alias  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


@pytest.fixture
def victim():
    """Tenant B's secrets (a key, a document, a chunk, a member) and attacker tenant A, with a user each."""
    a, b = make_tenant("Acme"), make_tenant("Globex")
    ApiKey.issue(tenant=a, name="acme key", role="admin")
    ApiKey.issue(tenant=b, name="globex key", role="admin")
    make_chunk(make_corpus(a, "acme"), "acme handbook", title="Acme handbook")
    make_chunk(make_corpus(b, "globex"), "globex merger plan", title="Globex merger plan")
    users = get_user_model().objects
    user_a, user_b = users.create_user(username="mallory"), users.create_user(username="victim")
    make_membership(user_a, a, "admin", all_departments=True)
    make_membership(user_b, b, "admin", all_departments=True)
    return a, b, user_a, user_b


def _read_b(setup: list[str], b_id: int) -> dict[str, list]:
    """What of tenant `b_id` the application role reads after running `setup` in a fresh savepoint."""
    with transaction.atomic(using="default"), connections["default"].cursor() as cur:
        for statement in setup:
            cur.execute(statement)
        out = {}
        for table, column in (("tenants_apikey", "secret_hash"), ("kb_document", "title"), ("kb_chunk", "text"),
                              ("tenants_membership", "role")):
            cur.execute(f"SELECT {column} FROM {table} WHERE tenant_id = %s", [b_id])
            out[table] = [r[0] for r in cur.fetchall()]
        transaction.set_rollback(True, using="default")
    return out


def _nothing(read: dict[str, list]) -> bool:
    return all(rows == [] for rows in read.values())


def test_the_applications_own_path_reads_its_tenant(victim):
    """The probes below are meaningful: with the application's statements B's rows are there."""
    _, b, _, _ = victim
    read = _read_b([db_wall.tenant_statements(b.id)], b.id)
    assert read["kb_document"] == ["Globex merger plan"] and read["kb_chunk"] == ["globex merger plan"]
    assert len(read["tenants_apikey"]) == 1 and read["tenants_membership"] == ["admin"]


def test_a_tenant_named_without_a_valid_proof_reads_nothing(victim):
    a, b, _, _ = victim
    future = int(time.time()) + 120
    forged = f"{future}.{secrets.token_hex(32)}"
    probes = {
        "set_config": [f"SELECT set_config('app.tenant_id', '{b.id}', true)"],
        "SET LOCAL, no proof": [f"SET LOCAL app.tenant_id = '{b.id}'"],
        "forged proof": [f"SET LOCAL app.tenant_id = '{b.id}'", f"SET LOCAL app.tenant_proof = '{forged}'"],
        # A's valid proof (the attacker's own tenant) swapped onto B's id.
        "A's proof on B": [f"SET LOCAL app.tenant_id = '{b.id}'",
                           f"SET LOCAL app.tenant_proof = '{db_wall.proof(db_wall.TENANT, a.id)}'"],
        # Correctly signed with the real key, but expired.
        "expired proof": [f"SET LOCAL app.tenant_id = '{b.id}'",
                          f"SET LOCAL app.tenant_proof = '{db_wall.sign(db_wall.TENANT, b.id, int(time.time()) - 5)}'"],
        # A user proof for the same number is not a tenant proof.
        "user proof as tenant proof": [f"SET LOCAL app.tenant_id = '{b.id}'",
                                       f"SET LOCAL app.tenant_proof = '{db_wall.sign(db_wall.USER, b.id, future)}'"],
        "malformed proof": [f"SET LOCAL app.tenant_id = '{b.id}'", "SET LOCAL app.tenant_proof = '99999999999999.zz'"],
        "tenant id with spaces": [f"SET LOCAL app.tenant_id = ' {b.id}'",
                                  f"SET LOCAL app.tenant_proof = '{db_wall.proof(db_wall.TENANT, b.id)}'"],
    }
    for name, setup in probes.items():
        assert _nothing(_read_b(setup, b.id)), name
    # And through set_config with a proof it does not have: the same.
    assert _nothing(_read_b([f"SELECT set_config('app.tenant_id', '{b.id}', true)",
                             f"SELECT set_config('app.tenant_proof', '{forged}', true)"], b.id))


def test_the_application_role_cannot_read_or_change_the_key(victim):
    for statement in ("SELECT * FROM grounded_private.wall_key",
                      "UPDATE grounded_private.wall_key SET k_ipad = k_opad",
                      "SELECT grounded_private.user_proven(1)",
                      "CREATE TABLE grounded_private.mine (id int)"):
        with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic(using="default"), \
                connections["default"].cursor() as cur:
            cur.execute(statement)
    with connections["default"].cursor() as cur:
        cur.execute("SELECT has_schema_privilege('grounded_private', 'USAGE'), "
                    "has_function_privilege('grounded_tenant()', 'EXECUTE')")
        assert cur.fetchone() == (False, True)


def test_the_user_look_up_answers_for_the_signed_in_user_only(victim):
    a, b, user_a, user_b = victim

    def tenants_of(user_id: int, setup: list[str]) -> list[tuple]:
        with transaction.atomic(using="default"), connections["default"].cursor() as cur:
            for statement in setup:
                cur.execute(statement)
            cur.execute("SELECT tenant_id, slug FROM grounded_user_tenants(%s)", [user_id])
            rows = cur.fetchall()
            transaction.set_rollback(True, using="default")
        return rows

    assert tenants_of(user_b.id, []) == []
    assert tenants_of(user_b.id, [f"SELECT set_config('app.user_id', '{user_b.id}', true)"]) == []
    assert tenants_of(user_b.id, [f"SET LOCAL app.user_id = '{user_b.id}'"]) == []
    # Mallory's own valid proof does not open the victim's memberships, nor does it under the victim's id.
    assert tenants_of(user_b.id, [db_wall.user_statements(user_a.id)]) == []
    assert tenants_of(user_b.id, [f"SET LOCAL app.user_id = '{user_b.id}'",
                                  f"SET LOCAL app.user_proof = '{db_wall.proof(db_wall.USER, user_a.id)}'"]) == []
    # A tenant proof for the same number is not a user proof.
    assert tenants_of(user_b.id, [f"SET LOCAL app.user_id = '{user_b.id}'",
                                  f"SET LOCAL app.user_proof = '{db_wall.proof(db_wall.TENANT, user_b.id)}'"]) == []
    # What the application does for the signed-in user still works.
    assert tenants_of(user_a.id, [db_wall.user_statements(user_a.id)]) == [(a.id, a.slug)]
    from tenants.principals import tenants_of_user

    assert [c.tenant_id for c in tenants_of_user(user_b)] == [b.id]


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])  # the owner sees committed rows only
def test_the_owner_role_is_unaffected(victim):
    """Migrations and maintenance log in as the owner: the plain setting is the tenant there."""
    _, b, _, user_b = victim
    with transaction.atomic(using="owner"), connections["owner"].cursor() as cur:
        cur.execute(f"SELECT set_config('app.tenant_id', '{b.id}', true)")
        cur.execute("SELECT grounded_tenant(), (SELECT title FROM kb_document WHERE tenant_id = %s)", [b.id])
        assert cur.fetchone() == (b.id, "Globex merger plan")
        cur.execute("SELECT count(*) FROM grounded_user_tenants(%s)", [user_b.id])
        assert cur.fetchone() == (1,)


def test_proofs_are_reused_for_part_of_their_life_and_formatted_from_digits_only(victim):
    a, _, _, _ = victim
    first = db_wall.proof(db_wall.TENANT, a.id)
    assert db_wall.proof(db_wall.TENANT, a.id) == first  # cached
    expiry = int(first.split(".")[0])
    assert db_wall.PROOF_LIFETIME_S - db_wall.PROOF_REUSE_S <= expiry - time.time() <= db_wall.PROOF_LIFETIME_S
    statements = db_wall.tenant_statements(a.id)
    assert statements == f"SET LOCAL app.tenant_id = '{a.id}'; SET LOCAL app.tenant_proof = '{first}'"
    for bad in (0, -1):
        with pytest.raises(ValueError):
            db_wall.tenant_statements(bad)
    assert db_wall.key_matches()


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])  # the key is installed on the owner connection
def test_a_key_the_database_does_not_hold_opens_nothing(victim):
    """A process whose key differs from the one `migrate` installed (a rotation half done) fails closed;
    installing its key (what the post-migrate hook does) makes it match again."""
    _, b, _, _ = victim
    try:
        with override_settings(DATABASE_WALL_KEY=secrets.token_hex(32)):
            db_wall.reset()
            assert not db_wall.key_matches()
            assert _nothing(_read_b([db_wall.tenant_statements(b.id)], b.id))
            db_wall.install_key("owner")
            assert db_wall.key_matches()
            assert _read_b([db_wall.tenant_statements(b.id)], b.id)["kb_document"] == ["Globex merger plan"]
    finally:
        db_wall.reset()
        db_wall.install_key("owner")  # the key file's again
    assert db_wall.key_matches()


def _policies(alias: str) -> dict[tuple[str, str], str]:
    with connections[alias].cursor() as cur:
        cur.execute("SELECT tablename, policyname, coalesce(qual, '') || ' ' || coalesce(with_check, '') FROM pg_policies "
                    "WHERE schemaname = 'public'")
        return {(t, p): text for t, p, text in cur.fetchall()}


def test_migration_0007_rewrites_every_policy_and_reverses(scratch_alias):  # noqa: F811
    """A database whose policies read `app.tenant_id` (as every deployment's did) gets the wall on `migrate`."""
    executor = MigrationExecutor(connections[scratch_alias])
    executor.migrate(executor.loader.graph.leaf_nodes())  # every app's latest
    latest = _policies(scratch_alias)
    tenant_policies = {k for k, text in latest.items() if "grounded_tenant()" in text}
    assert len(tenant_policies) >= 20 and not any("app.tenant_id" in text for text in latest.values())
    migrate_to(scratch_alias, ("tenants", "0006_guard_user_accounts"))
    legacy = _policies(scratch_alias)
    # The department link tables' policies compared no tenant before tenants 0008 (EXISTS on both ends).
    compared = {k for k in tenant_policies if not k[0].endswith("_departments")}
    assert len(compared) >= 20
    assert all("current_setting('app.tenant_id'" in legacy[k] and "grounded_tenant" not in legacy[k] for k in compared)
    migrate_to(scratch_alias, ("tenants", "0007_database_wall"))
    walled = _policies(scratch_alias)
    assert all("grounded_tenant()" in walled[k] and "app.tenant_id" not in walled[k] for k in compared)
    executor = MigrationExecutor(connections[scratch_alias])
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert _policies(scratch_alias) == latest
    with connections[scratch_alias].cursor() as cur:
        cur.execute("SELECT prosrc FROM pg_proc WHERE proname = 'grounded_guard_user_accounts'")
        assert "grounded_tenant()" in cur.fetchone()[0]


def test_healthz_reports_a_wall_key_the_database_does_not_hold(client):
    """The one symptom of a mismatched key would otherwise be empty results everywhere."""
    assert client.get("/healthz").json()["database_wall"] == "ok"
    try:
        with override_settings(DATABASE_WALL_KEY=secrets.token_hex(32)):
            db_wall.reset()
            response = client.get("/healthz")
    finally:
        db_wall.reset()
    assert response.status_code == 503 and response.json()["database_wall"].startswith("key mismatch")


def test_the_key_check_on_a_database_without_the_wall_raises_and_leaves_the_connection_usable(scratch_alias):  # noqa: F811
    migrate_to(scratch_alias, ("tenants", "0002_tenant_user"))  # before any policy: no grounded_tenant()
    with pytest.raises(DatabaseError):
        db_wall.key_matches(scratch_alias)
    with connections[scratch_alias].cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
