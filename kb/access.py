"""Who may see and change a tenant's knowledge base: corpora, documents, chunks and ingestion jobs.
The one home of these rules (tenants.access states the conventions); the API and the admin site
both use them.

Visibility: a corpus is visible when it is tenant-wide or in one of the caller's departments; a
document, chunk or job only when its own department is visible AND its corpus is (a department's
document in a tenant-wide corpus stays with its department). Chunks are read for answers only through
kb.retrieval.search, which applies the same scope; the chunk rule here serves the admin's browser.

Changes are narrower than reads (Scope.may_change_department): a department-limited caller reads
tenant-wide rows but changes only rows of its own departments.
"""

from __future__ import annotations

from django.db.models import QuerySet

from kb.models import Chunk, ChunkSentence, Corpus, Document, IngestJob, Source, SourceChange, SourceItem, SourceSync
from tenants.access import follows_parent, one, role_check, visibility_rule
from tenants.scope import NotAllowed, Scope

EDITORS = frozenset({"admin", "editor", "system"})
CORPUS_MANAGERS = frozenset({"admin", "system"})


@visibility_rule(Corpus)
def visible_corpora(scope: Scope) -> QuerySet:
    return Corpus.objects.for_scope(scope)


# Each rule below is Model.objects.for_scope(scope) (the row's own department, where it has one)
# filtered to rows whose parent is visible (tenants.access.follows_parent).
visible_documents = follows_parent(Document, "corpus", visible_corpora)
visible_chunks = follows_parent(Chunk, "corpus", visible_corpora)
visible_chunk_sentences = follows_parent(ChunkSentence, "chunk", visible_chunks)
# Jobs carry no department: they are visible through their corpus.
visible_jobs = follows_parent(IngestJob, "corpus", visible_corpora)
# A source is visible through its corpus (its credentials never are: no rule returns them).
visible_sources = follows_parent(Source, "corpus", visible_corpora)
visible_source_syncs = follows_parent(SourceSync, "source", visible_sources)
# Items carry their document's department: another department's file names stay hidden.
visible_source_items = follows_parent(SourceItem, "source", visible_sources)
visible_source_changes = follows_parent(SourceChange, "sync__source", visible_sources)


def access_source(scope: Scope, source_id: object) -> Source:
    return one(visible_sources(scope).select_related("corpus"), source_id, "source")


def access_corpus(scope: Scope, corpus_id: object) -> Corpus:
    return one(visible_corpora(scope), corpus_id, "corpus")


def access_document(scope: Scope, document_id: object) -> Document:
    return one(visible_documents(scope).select_related("corpus"), document_id, "document")


def access_job(scope: Scope, job_id: object) -> IngestJob:
    return one(visible_jobs(scope), job_id, "job")


check_may_edit_documents = role_check(EDITORS, "your role does not allow changing documents")
check_may_manage_corpora = role_check(CORPUS_MANAGERS, "your role does not allow managing corpora")


def check_may_change(scope: Scope, obj: Corpus | Document, what: str) -> None:
    """`obj` (visible to `scope`) may be changed or deleted by it: its role allows it and the row is in
    one of its departments (or it is tenant-wide)."""
    (check_may_manage_corpora if isinstance(obj, Corpus) else check_may_edit_documents)(scope)
    scope.check_may_change(obj.department_id, what)


def check_may_manage_source(scope: Scope, corpus: Corpus, department_ids: set[int | None]) -> None:
    """Add, change, pause, sync or delete a source of `corpus` (visible to `scope`): the role that
    manages corpora, a corpus the caller may change, and mapping rules only into departments it may
    change (a rule never places documents where the caller itself could not)."""
    check_may_manage_corpora(scope)
    if not scope.may_change_department(corpus.department_id):
        raise NotAllowed("a department-limited admin manages only the sources of its departments' corpora", field="corpus")
    for department_id in department_ids:
        if corpus.department_id is not None and department_id != corpus.department_id:
            raise NotAllowed("this corpus belongs to a department: its documents stay there", field="department_rules")
        if not scope.may_change_department(department_id):
            raise NotAllowed("a mapping rule names a department you may not change", field="department_rules")


def check_may_create_corpus(scope: Scope, department_id: int | None) -> None:
    """A new corpus goes into one of the caller's departments (tenant-wide only for a tenant-wide admin)."""
    check_may_manage_corpora(scope)
    if not scope.may_change_department(department_id):
        raise NotAllowed("a department-limited admin must place the corpus in one of its departments", field="department")


def check_may_export_corpus(scope: Scope, corpus: Corpus) -> None:
    """Export `corpus` (visible to `scope`) to a file (kb.transfer): the role that manages corpora and a
    corpus the caller may change; a department-limited admin exports only its departments' corpora."""
    check_may_change(scope, corpus, "corpus")


def check_may_import_corpus(scope: Scope, department_id: int | None) -> None:
    """Import a corpus file (kb.transfer) as a new corpus of the caller's tenant, in `department_id`:
    as creating a corpus there. The tenant is always the caller's, never the file's."""
    check_may_create_corpus(scope, department_id)
