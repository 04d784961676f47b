"""kb 0010: chunk and sentence vectors move to `halfvec`, every HNSW index with them, on a database of its own.

Migrated step by step (0009 -> 0010 -> back to 0009) with a chunk, a sentence, the migration-made
model index and a scope index as kb.vector_index builds them before 0010: the columns change type,
the indexes keep their names and predicates on the halfvec expression, the vectors are the fp16
roundings of the stored ones, and the embedding cache stays float4.
"""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connections

from tests.kb.scratch_database import migrate_to, scratch_alias  # noqa: F401  (fixture)

BEFORE = ("kb", "0009_source_grants")
AFTER = ("kb", "0010_halfvec_storage")
SCOPE_INDEX = "chunk_hnsw_minilm_l6_v2_384_t1"




def catalog(alias: str) -> tuple[dict[str, str], dict[str, str]]:
    """(table.column -> type of each embedding column, HNSW index name -> definition)."""
    with connections[alias].cursor() as cur:
        cur.execute("SELECT c.relname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "JOIN pg_class c ON c.oid = a.attrelid WHERE a.attname = 'embedding' AND c.relkind = 'r' "
                    "AND c.relname IN ('kb_chunk', 'kb_chunksentence', 'kb_embeddingcache')")
        types = dict(cur.fetchall())
        cur.execute("SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'hnsw'")
        return types, dict(cur.fetchall())


def vectors(alias: str) -> tuple[list[float], list[float]]:
    with connections[alias].cursor() as cur:
        cur.execute("SELECT (SELECT embedding::text FROM kb_chunk), (SELECT embedding::text FROM kb_chunksentence)")
        chunk, sentence = cur.fetchone()
    return ([float(v) for v in chunk.strip("[]").split(",")], [float(v) for v in sentence.strip("[]").split(",")])


@pytest.mark.tenantless_sql("migrations run by the executor directly (outside `migrate`) and read whole tables")
def test_0010_moves_vectors_and_every_hnsw_index_to_halfvec_and_back(scratch_alias):  # noqa: F811  (the fixture)
    alias = scratch_alias
    apps = migrate_to(alias, BEFORE)
    rng = np.random.default_rng(7)
    chunk_vec = rng.standard_normal(384).astype(np.float32)
    chunk_vec /= np.linalg.norm(chunk_vec)
    sentence_vec = rng.standard_normal(384).astype(np.float32)
    literal = "[" + ",".join(repr(float(v)) for v in chunk_vec) + "]"
    Tenant, Corpus, Document, Chunk, Sentence, Cache = (apps.get_model(*m.split(".")) for m in (
        "tenants.Tenant", "kb.Corpus", "kb.Document", "kb.Chunk", "kb.ChunkSentence", "kb.EmbeddingCache"))
    tenant = Tenant.objects.using(alias).create(name="Acme", slug="acme")
    corpus = Corpus.objects.using(alias).create(tenant=tenant, name="Policies", embedding_model="minilm-l6-v2", embedding_dim=384)
    document = Document.objects.using(alias).create(tenant=tenant, corpus=corpus, title="Travel", source_name="travel.txt",
                                                    mime_type="text/plain", sha256="0" * 64, status="ready")
    chunk = Chunk.objects.using(alias).create(tenant=tenant, corpus=corpus, document=document, ordinal=0, text="x", char_start=0,
                                              char_end=1, content_hash="h", embedding=chunk_vec, embedding_model="minilm-l6-v2:384")
    Sentence.objects.using(alias).create(tenant=tenant, chunk=chunk, ordinal=0, char_start=0, char_end=1, embedding=sentence_vec,
                                         embedding_model="minilm-l6-v2:384")
    Cache.objects.using(alias).create(tenant=tenant, model_key="minilm-l6-v2:384", text_sha256="h", embedding=chunk_vec)
    with connections[alias].cursor() as cur:
        # A scope index as kb.vector_index built it before 0010.
        cur.execute(f"CREATE INDEX {SCOPE_INDEX} ON kb_chunk USING hnsw ((embedding::vector(384)) vector_cosine_ops) "
                    f"WHERE embedding_model = 'minilm-l6-v2:384' AND tenant_id = {int(tenant.pk)}")
    types, before = catalog(alias)
    assert types == {"kb_chunk": "vector", "kb_chunksentence": "vector", "kb_embeddingcache": "vector"}
    assert set(before) == {"chunk_hnsw_minilm_l6_v2_384", SCOPE_INDEX}

    migrate_to(alias, AFTER)

    types, after = catalog(alias)
    assert types == {"kb_chunk": "halfvec", "kb_chunksentence": "halfvec", "kb_embeddingcache": "vector"}
    assert set(after) == set(before)
    for name, definition in after.items():
        assert "::halfvec(384)) halfvec_cosine_ops" in definition and "vector_cosine_ops" not in definition.replace("halfvec_", "")
        assert definition.split(" WHERE ")[1] == before[name].split(" WHERE ")[1]  # same predicate
    got_chunk, got_sentence = vectors(alias)
    assert got_chunk == pytest.approx(chunk_vec.astype(np.float16).astype(np.float64).tolist(), rel=1e-3, abs=1e-7)
    assert got_sentence == pytest.approx(sentence_vec.astype(np.float16).astype(np.float64).tolist(), rel=1e-3, abs=1e-7)
    assert max(abs(a - b) for a, b in zip(got_chunk, chunk_vec.tolist(), strict=True)) > 0  # rounded, not float4
    with connections[alias].cursor() as cur:  # the search expression can use the rebuilt index
        cur.execute("SET enable_seqscan = off")
        cur.execute("EXPLAIN SELECT id FROM kb_chunk WHERE embedding_model = 'minilm-l6-v2:384' "
                    "ORDER BY (embedding::halfvec(384)) <=> %s::halfvec(384) LIMIT 5", [literal])
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "chunk_hnsw_minilm_l6_v2_384" in plan

    migrate_to(alias, BEFORE)

    types, back = catalog(alias)
    assert types == {"kb_chunk": "vector", "kb_chunksentence": "vector", "kb_embeddingcache": "vector"}
    assert {name: d.replace("public.", "") for name, d in back.items()} == {name: d.replace("public.", "") for name, d in before.items()}
