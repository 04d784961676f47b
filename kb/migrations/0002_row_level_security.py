from django.db import migrations

from tenants.rls import enable_rls

TENANT_TABLES = ["kb_corpus", "kb_document", "kb_documentcontent", "kb_chunk", "kb_embeddingcache", "kb_ingestjob"]


class Migration(migrations.Migration):
    dependencies = [("kb", "0001_initial")]

    operations = [enable_rls(t) for t in TENANT_TABLES] + [
        # The default local model's own HNSW index (kb.vector_index creates one per other model).
        migrations.RunSQL(
            "CREATE INDEX IF NOT EXISTS chunk_hnsw_minilm_l6_v2_384 ON kb_chunk "
            "USING hnsw ((embedding::vector(384)) vector_cosine_ops) "
            "WHERE embedding_model = 'minilm-l6-v2:384'",
            "DROP INDEX IF EXISTS chunk_hnsw_minilm_l6_v2_384",
        ),
    ]
