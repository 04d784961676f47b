"""The demo tenant: Kestrel Analytics, two departments, policies from kb/demo/ through the real ingestion.

Idempotent: tenant, departments, corpora, users and documents are created once; re-uploading the
same bytes is a no-op in kb.ingest.upload_document.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import transaction

from kb.ingest import upload_document
from kb.models import Corpus, Document, DocumentStatus
from tenants.models import Department, Membership, Tenant, TenantUser
from tenants.scope import Scope, activate

DEMO_DIR = Path(__file__).resolve().parent.parent / "kb" / "demo"
TENANT_SLUG = "kestrel"
TENANT_NAME = "Kestrel Analytics"
DEPARTMENTS = ("Engineering", "Sales")
DEMO_QUESTION = ("I'm extending a business trip to Lisbon with three personal days. Which travel expenses can I still "
                 "claim, and which leave applies to the extra days?")


@dataclass(frozen=True)
class DemoDoc:
    filename: str
    corpus: str
    department: str | None
    metadata: dict
    language: str = "english"  # the corpus's text search language (kb.models.Corpus.language)


DOCS = (
    DemoDoc("leave-policy.md", "Company policies", None, {"source": "People Team", "category": "leave", "published_at": "2026-01-15"}),
    DemoDoc("travel-and-expense-policy.md", "Company policies", None,
            {"source": "Finance", "category": "travel", "published_at": "2026-02-01"}),
    DemoDoc("it-security-policy.md", "Company policies", None,
            {"source": "Security Team", "category": "security", "published_at": "2026-03-01"}),
    DemoDoc("engineering-production-access.md", "Engineering handbook", "Engineering",
            {"source": "Engineering", "category": "security", "published_at": "2026-03-01"}),
    DemoDoc("sales-client-entertainment.md", "Sales handbook", "Sales",
            {"source": "Sales Operations", "category": "travel", "published_at": "2026-02-01"}),
    DemoDoc("politique-teletravail-lyon.md", "Politiques du bureau de Lyon", None,
            {"source": "RH Lyon", "category": "télétravail", "published_at": "2026-03-01"}, language="french"),
)
USERS = (("ada", "Engineering"), ("sam", "Sales"))


def load_demo(*, wait_seconds: float = 120.0, log: Callable[[str], object] = print) -> Tenant:
    """Create or refresh the demo tenant and wait until its documents are ingested."""
    tenant = seed_demo(log=log)
    wait_until_ready(Scope.system(tenant.id, principal="load_demo"), wait_seconds, log)
    return tenant


def seed_demo(*, log: Callable[[str], object] = print) -> Tenant:
    """Tenant, departments, corpora, users, and the uploads (ingestion runs after commit, or in a worker)."""
    with transaction.atomic(using="default"):
        tenant, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": TENANT_NAME})
    scope = Scope.system(tenant.id, principal="load_demo")
    with activate(scope):
        departments = {name: Department.objects.get_or_create(tenant=tenant, name=name)[0] for name in DEPARTMENTS}
    corpora: dict[str, Corpus] = {}
    for doc in DOCS:
        if doc.corpus not in corpora:
            with activate(scope):
                corpora[doc.corpus], _ = Corpus.objects.for_scope(scope).get_or_create(
                    tenant=tenant, name=doc.corpus,
                    defaults={"department": departments[doc.department] if doc.department else None,
                              "description": f"Kestrel Analytics {doc.corpus.lower()}", "language": doc.language,
                              # the demo's documents are dated and labelled by source and category
                              "date_key": "published_at", "facet_keys": ["source", "category"]})
        data = (DEMO_DIR / doc.filename).read_bytes()
        title = data.decode().splitlines()[0].lstrip("# ").strip()
        document, job = upload_document(scope=scope, corpus=corpora[doc.corpus], filename=doc.filename, data=data,
                                        metadata=doc.metadata, title=title)
        log(f"{'queued ' if job else 'current'} {doc.corpus} / {doc.filename}")
    _ensure_users(scope, tenant, departments)
    return tenant


def _ensure_users(scope: Scope, tenant: Tenant, departments: dict[str, Department]) -> None:
    """The demo's readers: users of the demo tenant (their home), one department each."""
    user_model = get_user_model()
    for username, dept in USERS:
        with activate(scope):
            user, created = user_model.objects.get_or_create(username=username, defaults={"password": make_password(None)})
            if created:
                TenantUser.objects.create(user=user, tenant=tenant)
            membership, _ = Membership.objects.get_or_create(user=user, tenant=tenant, defaults={"role": "reader"})
            membership.departments.set([departments[dept]])


def wait_until_ready(scope: Scope, wait_seconds: float, log: Callable[[str], object]) -> None:
    deadline = time.monotonic() + wait_seconds
    while True:
        with activate(scope):
            states = dict(Document.objects.for_scope(scope).values_list("source_name", "status"))
        pending = [n for n, s in states.items() if s in (DocumentStatus.PENDING, DocumentStatus.PROCESSING)]
        failed = [n for n, s in states.items() if s == DocumentStatus.FAILED]
        if failed:
            raise RuntimeError(f"demo documents failed to ingest: {', '.join(failed)}")
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"demo documents still ingesting after {wait_seconds:.0f}s: {', '.join(pending)} (is a worker running?)")
        log(f"waiting for ingestion: {', '.join(pending)}")
        time.sleep(1.0)


def demo_scope(tenant: Tenant, username: str = "ada") -> Scope:
    """The scope of demo user `username`'s membership."""
    with activate(Scope.system(tenant.id, principal="load_demo")):
        return Membership.objects.get(tenant=tenant, user__username=username).scope()
