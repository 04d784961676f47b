"""kb.metadata's facets: declared and discovered enumerations, the date range, under the caller's scope."""

from __future__ import annotations

import hashlib

import pytest

from kb.ingest.dates import document_date
from kb.metadata import KeyStats, enumeration_keys, scope_facets
from kb.models import Corpus, Document
from tenants.scope import activate
from tests.factories import department, dept_scope, make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def corpus(tenant, name, dept=None, **declared) -> Corpus:
    with activate(whole_tenant(tenant)):
        return Corpus.objects.create(tenant=tenant, name=name, department=dept, embedding_model="hash", embedding_dim=64,
                                     **declared)


def doc(c: Corpus, title: str, metadata: dict, status: str = "ready") -> Document:
    with activate(whole_tenant(c.tenant)):
        return Document.objects.create(tenant=c.tenant, corpus=c, department=c.department, title=title, source_name=title,
                                       mime_type="text/plain", sha256=hashlib.sha256(title.encode()).hexdigest(),
                                       status=status, metadata=metadata, dated_at=document_date(metadata, c.date_key))


@pytest.fixture
def acme():
    tenant = make_tenant("Acme")
    sales, eng = department(tenant, "Sales"), department(tenant, "Engineering")
    wide = corpus(tenant, "Handbook", facet_keys=["owner"], date_key="effective_date")
    for i in range(6):
        doc(wide, f"Policy {i}", {"category": "travel" if i % 2 else "leave", "headline": f"Policy number {i} in full",
                                  "effective_date": f"2024-0{i + 1}-15", "pages": i + 1,
                                  **({"owner": "HR"} if i == 0 else {})})
    doc(wide, "Draft", {"category": "draft-only"}, status="pending")  # not ready: not counted
    sales_corpus = corpus(tenant, "Sales playbook", sales, date_key="signed")
    for i in range(2):
        doc(sales_corpus, f"Deal {i}", {"category": "pricing", "headline": f"Deal {i}", "signed": "2025-02-01"})
    eng_corpus = corpus(tenant, "Eng wiki", eng)
    for i in range(2):
        doc(eng_corpus, f"Runbook {i}", {"category": "oncall", "headline": f"Runbook {i}"})
    return tenant, wide, sales_corpus, eng_corpus


def test_declared_and_discovered_enumerations_and_dates(acme):
    tenant, wide, _, _ = acme
    out = scope_facets(whole_tenant(tenant))
    assert out["enumerations"] == {
        "owner": {"HR": 1},  # declared: offered even with one document
        "category": {"leave": 3, "travel": 3, "oncall": 2, "pricing": 2},  # discovered: 4 values over 10 documents
    }
    # Free text (one value per document) and numbers are not enumerations; date keys are dates.
    assert out["other_keys"] == ["headline", "pages"]
    # Two corpora name different date keys: the range is on dated_at.
    assert out["dates"] == {"key": "dated_at", "earliest": "2024-01-15T00:00:00+00:00", "latest": "2025-02-01T00:00:00+00:00"}
    one = scope_facets(whole_tenant(tenant), corpus_ids=[wide.id])
    assert one["dates"] == {"key": "effective_date", "earliest": "2024-01-15T00:00:00+00:00",
                            "latest": "2024-06-15T00:00:00+00:00"}
    assert one["enumerations"] == {"owner": {"HR": 1}, "category": {"leave": 3, "travel": 3}}


def test_a_department_sees_only_its_own_values(acme):
    tenant, *_ = acme
    out = scope_facets(dept_scope(tenant, "Engineering"))
    assert out["enumerations"]["category"] == {"leave": 3, "travel": 3, "oncall": 2}
    assert "pricing" not in str(out)
    assert out["dates"]["latest"] == "2024-06-15T00:00:00+00:00"  # not the Sales deal's date
    other = make_tenant("Globex")
    assert scope_facets(whole_tenant(other)) == {"enumerations": {}, "dates": None, "other_keys": []}


def test_max_values_bounds_discovery_and_listing(acme):
    tenant, *_ = acme
    out = scope_facets(whole_tenant(tenant), max_values=3)
    assert "category" not in out["enumerations"]  # 4 distinct values: more than 3
    assert out["enumerations"] == {"owner": {"HR": 1}}
    assert "category" in out["other_keys"]


def test_enumeration_keys_by_shape():
    stats = {"category": KeyStats(100, 5), "title": KeyStats(100, 100), "url": KeyStats(100, 99),
             "pair": KeyStats(4, 2), "lonely": KeyStats(1, 1), "many": KeyStats(1000, 60), "team": KeyStats(3, 3)}
    assert enumeration_keys(stats, ["team", "absent"], max_values=50) == ["team", "category", "pair"]
    assert enumeration_keys(stats, [], max_values=50, exclude=["category"]) == ["pair"]
    assert enumeration_keys(stats, [], max_values=100) == ["category", "many", "pair"]
