"""API fixtures: two tenants (A with Sales/Engineering, B full of canary strings) and keys per role."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import redis
from django.core.cache import cache
from rest_framework.test import APIClient

from kb.ingest import run_ingest_job, upload_document
from kb.models import Corpus
from tenants.conf.environment import get_str
from tenants.models import ApiKey, Department, Tenant
from tests.factories import department, make_corpus, make_tenant, whole_tenant

CANARY = "CANARY-GLOBEX-7f3a"


@dataclass
class World:
    a: Tenant
    b: Tenant
    sales: Department
    eng: Department
    shared: Corpus  # tenant A, no department
    sales_corpus: Corpus
    eng_corpus: Corpus
    b_corpus: Corpus
    keys: dict[str, str] = field(default_factory=dict)  # "<tenant>-<role>" -> raw key

    def client(self, who: str | None) -> APIClient:
        c = APIClient()
        if who:
            c.credentials(HTTP_AUTHORIZATION=f"Bearer {self.keys[who]}")
        return c


def issue(tenant: Tenant, role: str, departments: list[Department] | None = None) -> str:
    _, raw = ApiKey.issue(tenant=tenant, name=f"{role} key", role=role, all_departments=departments is None,
                          departments=departments)
    return raw


@pytest.fixture(autouse=True)
def _fresh_limits(settings):
    """Each test starts with empty rate-limit windows in the cache fallback."""
    settings.RATE_LIMIT_REDIS_URL = ""
    cache.clear()


def ingest(corpus: Corpus, title: str, text: str) -> None:
    """Upload and ingest one document synchronously (real parsing, chunking, hash embeddings)."""
    scope = whole_tenant(corpus.tenant)
    _, job = upload_document(scope=scope, corpus=corpus, filename=f"{title}.md", data=f"# {title}\n\n{text}\n".encode(),
                             title=title)
    run_ingest_job(job_id=job.id, tenant_id=corpus.tenant_id)


@pytest.fixture
def world(db) -> World:
    a = make_tenant("Acme")
    b = make_tenant("Globex")
    sales, eng = department(a, "Sales"), department(a, "Engineering")
    w = World(a=a, b=b, sales=sales, eng=eng, shared=make_corpus(a, "shared"),
              sales_corpus=make_corpus(a, "sales-only", department=sales), eng_corpus=make_corpus(a, "eng-only", department=eng),
              b_corpus=make_corpus(b, f"globex {CANARY}"))
    ingest(w.shared, "Travel policy", "Employees may book hotels up to 150 EUR per night.")
    ingest(w.sales_corpus, "Pricing", "Sales discount ceiling is 20 percent.")
    ingest(w.eng_corpus, "Runbook", "On-call engineers rotate weekly.")
    ingest(w.b_corpus, f"Globex travel {CANARY}", f"Globex hotel limit {CANARY} is 900 EUR per night.")
    for role in ("admin", "editor", "reader", "auditor"):
        w.keys[f"a-{role}"] = issue(a, role)
        w.keys[f"b-{role}"] = issue(b, role)
    w.keys["a-sales-reader"] = issue(a, "reader", [sales])
    w.keys["a-sales-admin"] = issue(a, "admin", [sales])
    w.keys["a-sales-auditor"] = issue(a, "auditor", [sales])
    return w


@pytest.fixture
def fixed_lockout_window(monkeypatch):
    """The failed-sign-in lockout counts per fixed window (tenants.counters): pin the clock it reads
    one second into a window, so a test's attempts cannot straddle a window boundary (where the
    count restarts and a test of the lockout would fail by chance)."""
    import time as real_time
    from types import SimpleNamespace

    from tenants import counters

    window = 600 * 3_000_000  # a multiple of every window a test sets (600 s by default)
    monkeypatch.setattr(counters, "time", SimpleNamespace(time=lambda: window + 1.0, monotonic=real_time.monotonic))


@pytest.fixture(params=["cache", "redis"])
def backend(request, settings):
    """Where rate-limit and lockout counters live: the Django cache, or the test Redis (skipped without one)."""
    if request.param == "redis":
        url = get_str("GROUNDED_TEST_REDIS_URL")
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        except redis.RedisError:
            pytest.skip("no Redis for the tests")
        settings.RATE_LIMIT_REDIS_URL = url
    return request.param
