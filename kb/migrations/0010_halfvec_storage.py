"""Chunk and sentence vectors stored as `halfvec` (2-byte floats), with halfvec HNSW indexes.

Halves the vector bytes of the heap and of the per-model and per-scope HNSW indexes (figures:
docs/scaling.md, "Growth"). Every HNSW index on kb_chunk is rebuilt on `(embedding::halfvec(d))
halfvec_cosine_ops`, keeping its name and predicate: they are dropped first (ALTER COLUMN TYPE
would otherwise rebuild them on the old vector expression), the columns converted in place
(fp32 -> fp16, lossy: pgvector rounds to nearest), and the indexes built again. Invalid leftovers
of failed concurrent builds are dropped, not rebuilt (kb.vector_index builds them again).
The embedding cache (kb_embeddingcache) keeps float4: it is the model's output, not searched.

It takes an ACCESS EXCLUSIVE lock on both tables for the rewrite and the index builds (about the
HNSW build times of docs/scaling.md, "Growth", per million chunks): a maintenance window on large
installations. Reversible (halfvec -> vector, indexes of up to 2,000 dimensions back on vector_cosine_ops); the
precision lost going forward is not recovered.
"""

import re

import pgvector.django
from django.db import migrations

TABLES = ("kb_chunk", "kb_chunksentence")
VECTOR_MAX_DIM = 2000  # pgvector's HNSW limit for `vector` (kb.vector_index.VECTOR_MAX_DIM)
TO_HALF = re.compile(r"\(embedding\)::vector\((\d+)\)\) vector_cosine_ops")
TO_FULL = re.compile(r"\(embedding\)::halfvec\((\d+)\)\) halfvec_cosine_ops")


def _hnsw_indexes(cur, table: str) -> list[tuple[str, str, bool]]:
    cur.execute("SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
                "WHERE i.indrelid = %s::regclass AND a.amname = 'hnsw' ORDER BY c.relname", [table])
    return cur.fetchall()


def _convert(schema_editor, storage: str) -> None:
    with schema_editor.connection.cursor() as cur:
        # The HNSW graph of 1M 384-d halfvec rows takes about 1.2 GB; beyond this the build goes on disk (slower).
        cur.execute("SET LOCAL maintenance_work_mem = '2GB'")
        rebuild: list[str] = []
        for table in TABLES:
            for name, definition, valid in _hnsw_indexes(cur, table):
                if valid:
                    if storage == "halfvec":
                        definition = TO_HALF.sub(r"(embedding)::halfvec(\1)) halfvec_cosine_ops", definition)
                    else:
                        definition = TO_FULL.sub(lambda m: m.group(0) if int(m.group(1)) > VECTOR_MAX_DIM else
                                                 f"(embedding)::vector({m.group(1)})) vector_cosine_ops", definition)
                    rebuild.append(definition)
                cur.execute(f'DROP INDEX "{name}"')
        for table in TABLES:
            cur.execute(f"ALTER TABLE {table} ALTER COLUMN embedding TYPE {storage} USING embedding::{storage}")
        for definition in rebuild:
            cur.execute(definition)


def to_halfvec(apps, schema_editor) -> None:
    _convert(schema_editor, "halfvec")


def to_vector(apps, schema_editor) -> None:
    _convert(schema_editor, "vector")


class Migration(migrations.Migration):
    dependencies = [("kb", "0009_source_grants")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField("chunk", "embedding", pgvector.django.HalfVectorField(blank=True, null=True)),
                migrations.AlterField("chunksentence", "embedding", pgvector.django.HalfVectorField()),
            ],
            database_operations=[migrations.RunPython(to_halfvec, to_vector)],
        ),
    ]
