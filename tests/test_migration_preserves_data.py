"""The migrations that key tenant tables by tenant (issue 50) keep every row, every chunk vector and every
chain hash: a database holding the demo tenant and a second, small evaluation tenant, each with answered
questions (runs, steps, citations, evidence), is taken back to the schema before those migrations and
forward again, and nothing it holds changes.

It runs on a database of its own (a copy of the migrated template; the test database is never migrated
backwards), with its ids moved past the test database's so no per-id cache of this process (term
statistics, counters) ever meets them again. The data is written at the latest migration because the
product's code writes the current schema only; the reverse migrations stand in for the writer of the old
one, and the snapshot taken in the old shape must equal the original before the forward run is compared.
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from agents.chain import verify_tenant_chain
from agents.conversations import send_message, start_conversation
from agents.demo import DEMO_QUESTION, demo_scope, seed_demo
from agents.feedback import give_feedback
from agents.services import ask
from kb.ingest import upload_document
from kb.models import Corpus, SourceSync
from kb.retrieval.retrieve import close_side_connections
from kb.sources.grants import grant_source
from kb.sources.services import source_create
from kb.sources.sync import request_sync
from tenants.models import ApiKey, Department, Tenant
from tenants.scope import Scope, activate
from tests import databases

# The schema before the tenant-key migrations (tenants 0008, kb 0011, agents 0010). kb 0010 (halfvec
# storage) stays applied: it rounds vectors on purpose, and it is not what this test is about.
BEFORE = [("tenants", "0007_database_wall"), ("kb", "0010_halfvec_storage"), ("agents", "0009_runstep_model_input_help")]
FIRST_ID = 1_000_000_000
EVALUATION_DOCS = {
    "refunds.md": "# Refunds\n\nA customer may return an unused item within 30 days for a full refund. "
                  "Opened software is refunded only when it is faulty.\n",
    "shipping.md": "# Shipping\n\nOrders above 50 euros ship free within the EU. Express delivery costs 12 euros "
                   "and arrives the next working day.\n",
}


def _use(name: str) -> None:
    close_side_connections()
    for alias in ("owner", "default"):
        connections[alias].close()
        connections[alias].settings_dict["NAME"] = name  # the dict every thread's connection is made from


@pytest.fixture
def own_database(django_db_setup, django_db_blocker):
    """A copy of the migrated template, used by both aliases for the test, then dropped; the test database
    is back in use afterwards whatever happened. No test transaction wraps it (no django_db mark): what
    the test writes commits, as in production, and its on-commit ingest jobs run."""
    owner = connections["owner"]
    test_database, base = owner.settings_dict["NAME"], owner.settings_dict["TEST"]["NAME"]
    name = f"{test_database}_keep_{uuid.uuid4().hex[:8]}"
    with django_db_blocker.unblock():
        with owner._nodb_cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [databases.TEMPLATE_LOCK])  # no copy while one is built
            try:
                # The template this session's database was copied from (a migration edited since then
                # names another digest, which has no template yet).
                cur.execute(r"SELECT datname FROM pg_database WHERE datname LIKE %s AND datname NOT LIKE '%%\_new'",
                            [base.replace("_", r"\_") + r"\_tpl\_%"])
                (template,) = cur.fetchone() or (databases.template_name(base),)
                cur.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            finally:
                cur.execute("SELECT pg_advisory_unlock(%s)", [databases.TEMPLATE_LOCK])
        try:
            _use(name)
            call_command("migrate", database="owner", verbosity=0)  # its post-migrate hooks grant by database name
            with connections["owner"].cursor() as cur:
                cur.execute("""SELECT setval(c.oid, %s) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                                WHERE c.relkind = 'S' AND n.nspname = 'public'""", [FIRST_ID])
            yield name
        finally:
            _use(test_database)
            with owner._nodb_cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _seed_evaluation_tenant(folder: Path) -> Tenant:
    """A tenant with uploads and a synced folder source (sources, syncs, items, changes, a grant, and the
    source's last_sync pointing at its sync)."""
    tenant = Tenant.objects.create(name="Evaluation", slug="evaluation")
    scope = Scope.system(tenant.id, principal="test")
    with activate(scope):
        support = Department.objects.create(tenant=tenant, name="Support")
        corpus = Corpus.objects.create(tenant=tenant, name="Support handbook", department=support, sentence_vectors=True)
    for filename, text in EVALUATION_DOCS.items():
        upload_document(scope=scope, corpus=corpus, filename=filename, data=text.encode())
    ApiKey.issue(tenant=tenant, name="support desk", departments=[support])
    (folder / "share").mkdir()
    (folder / "share" / "warranty.md").write_text("# Warranty\n\nEvery device carries a two-year warranty.\n")
    grant_source(tenant=tenant, kind="folder", value=str(folder))  # as the operator does, through the owner
    admin = Scope(tenant_id=tenant.id, all_departments=True, role="admin", principal="test")
    source = source_create(scope=admin, corpus=corpus, name="Share", kind="folder", config={"path": str(folder / "share")})
    sync, _ = request_sync(scope=admin, source=source)  # runs at once: no transaction, eager jobs
    with activate(admin):
        assert SourceSync.objects.for_scope(admin).get(pk=sync.pk).status == "done"
    return tenant


def _snapshot() -> dict:
    """Rows per table, a digest of every stored vector, every run's place and hash in its chain."""
    with connections["owner"].cursor() as cur:
        cur.execute("""SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'django_migrations'
                        ORDER BY 1""")
        counts = {}
        for (table,) in cur.fetchall():
            cur.execute(f'SELECT count(*) FROM "{table}"')  # noqa: S608  (names from the catalog)
            counts[table] = cur.fetchone()[0]
        vectors = {}
        for table in ("kb_chunk", "kb_chunksentence"):
            cur.execute(f"SELECT id, embedding::text FROM {table} ORDER BY id")  # noqa: S608  (fixed names)
            vectors[table] = {pk: hashlib.sha256((text or "").encode()).hexdigest() for pk, text in cur.fetchall()}
        cur.execute("SELECT tenant_id, seq, id, prev_hash, hash FROM agents_run ORDER BY tenant_id, seq")
        chain = cur.fetchall()
    return {"counts": counts, "vectors": vectors, "chain": chain}


def _verified_chains() -> dict[int, tuple[int, bool]]:
    tenants = Tenant.objects.using("owner").values_list("id", flat=True)
    return {t: (report.runs_checked, report.ok) for t in tenants for report in [verify_tenant_chain(t)]}


@pytest.mark.tenantless_sql("counts and digests of every table, across tenants, on the owner connection")
def test_keying_by_tenant_keeps_every_row_vector_and_chain_hash(own_database, settings, tmp_path):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    demo = seed_demo(log=lambda line: None)  # no transaction around it: the ingest jobs run at once (eager)
    evaluation = _seed_evaluation_tenant(tmp_path)
    for scope, question in ((demo_scope(demo, "ada"), DEMO_QUESTION),
                            (demo_scope(demo, "sam"), "How much can I spend on client dinners?")):
        ask(scope=scope, question=question, provider="offline")
    reader = Scope(tenant_id=evaluation.id, all_departments=True, role="reader", principal="user:1")
    conversation = start_conversation(scope=reader)
    for message in ("How long do customers have to return an item?", "And how long is the warranty?"):
        run = send_message(scope=reader, conversation_id=conversation.pk, message=message, provider="offline")
    give_feedback(scope=reader, run_id=run.pk, rating="up", comment="clear")
    before = _snapshot()
    chains = _verified_chains()
    counts = before["counts"]
    assert counts["agents_run"] == 4 and counts["agents_citation"] > 0 and counts["agents_evidence"] > 0
    assert counts["agents_conversation"] == 1 and counts["agents_feedback"] == 1
    assert counts["tenants_membership_departments"] == 2 and counts["tenants_apikey_departments"] == 1
    assert counts["kb_sourceitem"] == 1 and counts["kb_sourcegrant"] == 1
    assert [table for table, n in counts.items() if n == 0 and table.startswith(("tenants_", "kb_", "agents_"))] == [], counts
    assert counts["kb_chunk"] > 10 and len(before["vectors"]["kb_chunk"]) == counts["kb_chunk"]
    assert chains == {demo.id: (2, True), evaluation.id: (2, True)}

    executor = MigrationExecutor(connections["owner"])
    executor.migrate(BEFORE)
    in_the_old_shape = _snapshot()
    call_command("migrate", database="owner", verbosity=0)
    after = _snapshot()

    assert in_the_old_shape == before
    assert after == before
    assert _verified_chains() == chains
