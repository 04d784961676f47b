"""Fetch-by-id through the scope. A missing id and another tenant's (or department's) id raise the
same NotFound, so responses never reveal what exists elsewhere. Must run inside `activate(scope)`.
"""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.exceptions import NotFound

from agents.models import Run
from kb.models import Corpus, Document, IngestJob
from tenants.models import ApiKey, Department, Membership
from tenants.scope import Scope


def _one(qs: QuerySet, obj_id, what: str):
    try:
        pk = int(obj_id)
    except (TypeError, ValueError):
        pk = None
    obj = qs.filter(pk=pk).first() if pk is not None and 0 < pk < 2**63 else None
    if obj is None:
        raise NotFound(f"{what} not found")
    return obj


def visible_corpora(scope: Scope) -> QuerySet:
    return Corpus.objects.for_scope(scope)


def visible_documents(scope: Scope) -> QuerySet:
    # A document inherits visibility from its own department and its corpus's.
    return Document.objects.for_scope(scope).filter(corpus__in=visible_corpora(scope))


def visible_jobs(scope: Scope) -> QuerySet:
    # Jobs carry no department: they are visible through their corpus.
    return IngestJob.objects.for_scope(scope).filter(corpus__in=visible_corpora(scope))


def access_corpus(scope: Scope, corpus_id) -> Corpus:
    return _one(visible_corpora(scope), corpus_id, "corpus")


def access_document(scope: Scope, document_id) -> Document:
    return _one(visible_documents(scope).select_related("corpus"), document_id, "document")


def access_job(scope: Scope, job_id) -> IngestJob:
    return _one(visible_jobs(scope), job_id, "job")


def access_department(scope: Scope, department_id) -> Department:
    qs = Department.objects.filter(tenant_id=scope.tenant_id)
    if not scope.all_departments:
        qs = qs.filter(id__in=scope.department_ids)
    return _one(qs, department_id, "department")


def _within_departments(qs: QuerySet, scope: Scope) -> QuerySet:
    """Principals (keys, memberships) a caller may see and manage: all of the tenant's for a whole-tenant
    caller; for a department-restricted one only those whose departments are a subset of its own visible
    departments, never an all-departments one (managing it would reach departments the caller can't see)."""
    qs = qs.filter(tenant_id=scope.tenant_id)
    if scope.all_departments:
        return qs
    through = qs.model.departments.through
    owner = f"{qs.model._meta.model_name}_id"
    outside = through.objects.exclude(department_id__in=sorted(scope.department_ids)).values(owner)
    return qs.filter(all_departments=False).exclude(pk__in=outside)


def visible_api_keys(scope: Scope) -> QuerySet:
    return _within_departments(ApiKey.objects.all(), scope)


def visible_memberships(scope: Scope) -> QuerySet:
    return _within_departments(Membership.objects.all(), scope)


def access_api_key(scope: Scope, key_id) -> ApiKey:
    return _one(visible_api_keys(scope), key_id, "API key")


def access_membership(scope: Scope, membership_id) -> Membership:
    return _one(visible_memberships(scope).select_related("user"), membership_id, "member")


def visible_runs(scope: Scope) -> QuerySet:
    """Runs the caller may audit. A department-restricted auditor sees only runs whose own scope was
    within its departments (a whole-tenant run could have read any department), which is why
    agents.services.access_run (tenant check only) is not used here."""
    qs = Run.objects.for_scope(scope)
    if not scope.all_departments:
        qs = qs.filter(scope__all_departments=False, scope__department_ids__contained_by=sorted(scope.department_ids))
    return qs


def access_run(scope: Scope, run_id) -> Run:
    return _one(visible_runs(scope), run_id, "run")
