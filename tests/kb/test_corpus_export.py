"""Corpus export and import (kb.transfer): the demo corpus round-trips into another tenant and searches
identically without embedding a document; every damaged file is refused with nothing written; the
import lands in the importing tenant only; importing twice writes once."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import zipfile

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.demo import DEMO_DIR, DOCS
from kb.access import visible_corpora
from kb.ingest import run_ingest_job, upload_document
from kb.models import Chunk, ChunkSentence, Corpus, Document, DocumentContent
from kb.retrieval import SearchFilters, search
from kb.transfer import FileRejected, export_corpus, import_corpus
from kb.transfer.fileformat import canonical_line
from tenants.models import Department, Tenant
from tenants.scope import Scope, activate
from tests.factories import make_tenant, whole_tenant
from tests.fakes import embedders as fake_embedders

os.environ.setdefault("GROUNDED_EMBEDDER_PLUGINS", "tests.fakes.embedders")

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

MODEL = "hash-counting"
DIM = 64
QUERIES = ["How many days of annual leave do I get?", "hotel nightly cap for business travel", "Which expenses can I claim?",
           "password rotation and multi-factor authentication", "production access approval", "client entertainment gifts",
           "télétravail jours par semaine", "parental leave", "per diem meals abroad", "security incident reporting"]


@pytest.fixture
def installation(settings):
    """This installation embeds with the counting hash model: a document embedded anywhere is counted."""
    settings.DEFAULT_EMBEDDER = f"{MODEL}:{DIM}"
    fake_embedders.reset_counts()


@pytest.fixture
def demo(installation, django_capture_on_commit_callbacks):
    """Tenant A with the demo policies (kb/demo) in one corpus with sentence vectors, ingested for real."""
    tenant = make_tenant("Acme")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Company policies", embedding_model=MODEL, embedding_dim=DIM,
                                       sentence_vectors=True, date_key="published_at", facet_keys=["source", "category"],
                                       chunk_target_tokens=120, description="the demo policies")
    for doc in DOCS:
        data = (DEMO_DIR / doc.filename).read_bytes()
        with django_capture_on_commit_callbacks(execute=False):
            _, job = upload_document(scope=scope, corpus=corpus, filename=doc.filename, data=data, metadata=doc.metadata)
        run_ingest_job(job_id=job.id, tenant_id=tenant.id)
    return scope, corpus


@pytest.fixture
def exported(demo) -> bytes:
    scope, corpus = demo
    out = io.BytesIO()
    export_corpus(scope=scope, corpus=corpus, out=out)
    return out.getvalue()


@pytest.fixture
def other():
    return whole_tenant(make_tenant("Beta"))


def load(scope: Scope, data: bytes, **kwargs):
    return import_corpus(scope=scope, stream=io.BytesIO(data), **kwargs)


def stored(scope: Scope) -> dict[str, int]:
    with activate(scope):
        s = Scope.system(scope.tenant_id)
        return {"corpora": Corpus.objects.for_scope(s).count(), "documents": Document.objects.for_scope(s).count(),
                "chunks": Chunk.objects.for_scope(s).count(), "sentences": ChunkSentence.objects.for_scope(s).count(),
                "contents": DocumentContent.objects.for_scope(s).count()}


def results(scope: Scope, corpus_id: int, query: str, mode: str, rerank: bool) -> list[tuple[str, str, float]]:
    found = search(scope, query, k=8, mode=mode, filters=SearchFilters(corpus_ids=(corpus_id,)), rerank=rerank)  # type: ignore[arg-type]
    return [(h.document_title, h.text, h.score) for h in found.hits]


def test_round_trip_into_another_tenant_searches_identically_without_embedding(demo, exported, other):
    scope, corpus = demo
    fake_embedders.reset_counts()
    result = load(other, exported)
    assert result.created and not result.reembedded
    assert fake_embedders.embed_counts() == {}, "importing embedded documents"
    assert result.documents == len(DOCS) and result.chunks > len(DOCS) and result.sentences > result.chunks
    compared = 0
    for query in QUERIES:
        for mode, rerank in (("hybrid", True), ("hybrid", False), ("vector", False), ("keyword", False)):
            before, after = results(scope, corpus.pk, query, mode, rerank), results(other, result.corpus_id, query, mode, rerank)
            assert [(t, x) for t, x, _ in before] == [(t, x) for t, x, _ in after], (query, mode)
            assert np.allclose([s for *_, s in before], [s for *_, s in after], rtol=0, atol=1e-6), (query, mode)
            compared += bool(before)
    assert compared >= 30
    assert fake_embedders.embed_counts() == {}, "searching embedded documents"
    with activate(other):
        copy = Corpus.objects.for_scope(other).get(pk=result.corpus_id)
        docs = {d.source_name: d for d in Document.objects.for_scope(other).filter(corpus=copy)}
        data = dict(DocumentContent.objects.for_scope(other).values_list("document__source_name", "data"))
    assert (copy.name, copy.language, copy.date_key, copy.facet_keys, copy.sentence_vectors, copy.model_key) == \
        ("Company policies", "english", "published_at", ["source", "category"], True, f"{MODEL}:{DIM}")
    leave = docs["leave-policy.md"]
    assert leave.metadata["category"] == "leave" and leave.dated_at is not None and leave.status == "ready"
    assert bytes(data["leave-policy.md"]) == (DEMO_DIR / "leave-policy.md").read_bytes()


def test_importing_twice_writes_once(demo, exported, other):
    first = load(other, exported)
    before = stored(other)
    again = load(other, exported)
    assert not again.created and again.corpus_id == first.corpus_id and "already imported" in again.describe()
    assert stored(other) == before
    # Into the exporting tenant under the same name: the corpus there already holds this content.
    scope, corpus = demo
    assert not load(scope, exported).created
    renamed = load(other, exported, name="Policies (copy)")
    assert renamed.created and stored(other)["corpora"] == before["corpora"] + 1


def test_the_name_of_a_corpus_with_other_content_is_refused(demo, exported, other):
    with activate(other):
        Corpus.objects.create(tenant_id=other.tenant_id, name="Company policies")
    before = stored(other)
    with pytest.raises(FileRejected, match="already exists") as refused:
        load(other, exported)
    assert refused.value.field == "name" and stored(other) == before


def test_the_import_lands_in_the_importing_tenant_only(demo, exported, other):
    scope, corpus = demo
    before = stored(scope)
    result = load(other, exported)
    assert stored(scope) == before
    with activate(scope):
        assert result.corpus_id not in set(visible_corpora(scope).values_list("pk", flat=True))
    hits = search(scope, "annual leave", k=50).hits
    with activate(other):
        theirs = set(Chunk.objects.for_scope(other).values_list("pk", flat=True))
    assert hits and not {h.chunk_id for h in hits} & theirs
    # Ids come from this database, never from the file.
    with activate(scope):
        ours = set(Chunk.objects.for_scope(scope).values_list("pk", flat=True))
    assert not ours & theirs


# --- Damaged files: each refused, nothing written ---------------------------------------------------

def lines_of(data: bytes) -> list[dict]:
    return [json.loads(line) for line in gzip.decompress(data).splitlines()]


def packed(records: list[dict], *, redigest: bool = True) -> bytes:
    """The records as a file; with `redigest` the manifest's digest recomputed (only the change made is wrong)."""
    body = b"".join(canonical_line(r) for r in records[:-1])
    manifest = dict(records[-1])
    if redigest:
        manifest["sha256"] = hashlib.sha256(body).hexdigest()
    return gzip.compress(body + canonical_line(manifest))


def changed(data: bytes, kind: str, **fields) -> bytes:
    records = lines_of(data)
    target = next(r for r in records if r["kind"] == kind)
    target.update(fields)
    return packed(records)


def giant_line(data: bytes) -> bytes:
    """The header, then one line of 2 GiB (gzip members of 64 MiB each, compressed once): never read whole."""
    header = gzip.compress(canonical_line(lines_of(data)[0]) + b'{"kind":"chunk","text":"')
    member = gzip.compress(b"a" * (64 * 1024 * 1024), compresslevel=1)
    return header + member * 32 + gzip.compress(b'"}\n')


def zip_of(data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("corpus.jsonl.gz", data)
    return out.getvalue()


def other_dimension(data: bytes) -> bytes:
    records = lines_of(data)
    records[0]["embedding"].update(dim=32, key=f"{MODEL}:32")
    records[-1]["embedding_key"] = f"{MODEL}:32"
    return packed(records)


def other_model(data: bytes) -> bytes:
    records = lines_of(data)
    records[0]["embedding"].update(model="hash", key=f"hash:{DIM}")
    records[-1]["embedding_key"] = f"hash:{DIM}"
    return packed(records)


def short_vector(data: bytes) -> bytes:
    records = lines_of(data)
    chunk = next(r for r in records if r["kind"] == "chunk")
    chunk["embedding"] = base64.b64encode(base64.b64decode(chunk["embedding"])[:-2]).decode()
    return packed(records)


def not_utf8(data: bytes) -> bytes:
    body = gzip.decompress(data).split(b"\n")
    body[1] = body[1].replace(b'"title":"', b'"title":"\xff\xfe', 1)
    return gzip.compress(b"\n".join(body))


DAMAGE = {
    "truncated": (lambda d: d[: len(d) * 2 // 3], "truncated"),
    "wrong digest": (lambda d: packed([*lines_of(d)[:-1], {**lines_of(d)[-1], "sha256": "0" * 64}], redigest=False),
                     "digest does not match"),
    "altered record": (lambda d: packed([{**r, "title": "changed"} if r["kind"] == "document" else r for r in lines_of(d)],
                                        redigest=False), "digest does not match"),
    "wrong dimension": (other_dimension, "has 64 dimensions, the file declares 32"),
    "short vector": (short_vector, "has 63 dimensions"),
    "another model": (other_model, "which this installation does not use"),
    "2 GB line": (giant_line, "is longer than"),
    "zip archive": (zip_of, "zip archive"),
    "zip inside the gzip": (lambda d: gzip.compress(zip_of(d)), "holds a zip archive"),
    "plain JSON lines": (gzip.decompress, "not gzip-compressed"),
    "not UTF-8": (not_utf8, "is not UTF-8"),
    "missing manifest": (lambda d: gzip.compress(b"".join(canonical_line(r) for r in lines_of(d)[:-1])), "manifest is missing"),
    "empty text": (lambda d: changed(d, "chunk", text=" ", content_hash=hashlib.sha256(b" ").hexdigest()), "text is empty"),
    "text and hash disagree": (lambda d: changed(d, "chunk", text="another text"), "content_hash is not the sha256"),
    "counts": (lambda d: changed(d, "manifest", counts={"documents": 1, "chunks": 1, "sentences": 1}), "counts"),
    "future version": (lambda d: changed(d, "header", version=2), "version 2 is not supported"),
    "no header": (lambda d: packed(lines_of(d)[1:]), "not a corpus file header"),
    "NUL in a flag": (lambda d: changed(d, "chunk", flags=["\x00"]), "flags must be a list of short strings"),
    "a tenant named": (lambda d: changed(d, "header", tenant="acme"), "unknown field"),
    "a database id": (lambda d: changed(d, "document", id=1), "unknown field"),
    "unknown language": (lambda d: changed(d, "header", corpus={**lines_of(d)[0]["corpus"], "language": "klingon"}),
                         "is not a PostgreSQL text search configuration"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_file_is_refused_with_nothing_written(demo, exported, other, damage):
    make, message = DAMAGE[damage]
    before = stored(other)
    with pytest.raises(FileRejected, match=message):
        load(other, make(exported), max_line=32 * 1024 * 1024)
    assert stored(other) == before


def test_another_model_is_re_embedded_on_request(demo, exported, other):
    fake_embedders.reset_counts()
    result = load(other, other_model(exported), reembed=f"{MODEL}:{DIM}")
    assert result.created and result.reembedded and result.model_key == f"{MODEL}:{DIM}"
    assert fake_embedders.embed_counts(), "re-embedding embedded nothing"
    scope, corpus = demo
    assert results(scope, corpus.pk, QUERIES[0], "vector", False) == results(other, result.corpus_id, QUERIES[0], "vector", False)


def test_department_limited_documents_need_a_department(installation, django_capture_on_commit_callbacks, other):
    tenant = make_tenant("Gamma")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Mixed", embedding_model=MODEL, embedding_dim=DIM)
        engineering = tenant.departments.get(name="Engineering")
    _, job = upload_document(scope=scope, corpus=corpus, filename="eng.md", data=b"# Eng\n\nOn-call rota rules.",
                             department_id=engineering.pk)
    run_ingest_job(job_id=job.id, tenant_id=tenant.id)
    out = io.BytesIO()
    export_corpus(scope=scope, corpus=corpus, out=out)
    with pytest.raises(FileRejected, match="limited to a department") as refused:
        load(other, out.getvalue())
    assert refused.value.field == "department"
    sales = Scope.system(other.tenant_id)
    with activate(sales):
        target = make_department_id(other, "Sales")
    result = load(other, out.getvalue(), department_id=target)
    with activate(sales):
        assert set(Document.objects.for_scope(sales).filter(corpus_id=result.corpus_id)
                   .values_list("department_id", flat=True)) == {target}


def make_department_id(scope: Scope, name: str) -> int:
    return Department.objects.get(tenant_id=scope.tenant_id, name=name).pk


def test_commands_export_and_import(demo, other, tmp_path):
    scope, corpus = demo
    path = tmp_path / "policies.jsonl.gz"
    call_command("export_corpus", tenant=corpus.tenant.slug, corpus=corpus.name, out=path, stdout=io.StringIO())
    assert path.stat().st_size > 0 and not (tmp_path / "policies.jsonl.gz.partial").exists()
    slug = Tenant.objects.get(pk=other.tenant_id).slug
    out = io.StringIO()
    call_command("import_corpus", tenant=slug, file=path, stdout=out)
    assert "imported corpus 'Company policies'" in out.getvalue()
    out = io.StringIO()
    call_command("import_corpus", tenant=slug, file=path, stdout=out)
    assert "already imported" in out.getvalue()
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(CommandError, match="refused, nothing written"):
        call_command("import_corpus", tenant=slug, file=path, name="other", stdout=io.StringIO())
