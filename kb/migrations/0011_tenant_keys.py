"""The knowledge base's tables keyed by tenant (Citus distributes them by `tenant_id`, co-located; issue 50).

- Primary keys (tenant_id, id), (tenant_id, document_id) for a document's content.
- The unique constraints that lacked it start with tenant_id: a document's source name in its corpus, a
  chunk's ordinal in its document, a sentence's in its chunk, an item's key in its source.
- Foreign keys between these tables are `db_constraint=False` in Django (its `on_delete` runs in Python,
  as before) and (tenant_id, x_id) -> (tenant_id, id) in the database, keeping their actions: NO ACTION,
  deferred to commit, as Django made them, and kb 0004's sentence -> chunk ON DELETE CASCADE. A source's
  last sync stays NO ACTION: Citus refuses ON DELETE SET NULL on a key holding the distribution column,
  even PostgreSQL 15's SET NULL (last_sync_id) (its check reads the action, not the column list); Django's
  SET_NULL nulls the pointer before a sync is deleted. The keys to tenants_department were converted by
  tenants 0008.

No row is rewritten (chunk vectors included); each new key is checked against the rows. Reversible.
"""
import django.db.models.deletion
from django.db import migrations, models

from tenants.tenant_keys import key_by_tenant

NO_CONSTRAINT = {"db_constraint": False}


def fk(to: str, on_delete, related_name: str, **extra) -> models.ForeignKey:
    return models.ForeignKey(on_delete=on_delete, related_name=related_name, to=to, **NO_CONSTRAINT, **extra)


CASCADE, PROTECT, SET_NULL = (django.db.models.deletion.CASCADE, django.db.models.deletion.PROTECT,
                              django.db.models.deletion.SET_NULL)
OPTIONAL = {"blank": True, "null": True}

STATE = [
    migrations.AlterField("corpus", "department", fk("tenants.department", PROTECT, "+", help_text="Empty: visible to the whole tenant.",
                                                     **OPTIONAL)),
    migrations.AlterField("document", "corpus", fk("kb.corpus", CASCADE, "documents")),
    migrations.AlterField("document", "department", fk("tenants.department", PROTECT, "+", **OPTIONAL)),
    migrations.AlterField("documentcontent", "document", models.OneToOneField(
        db_constraint=False, on_delete=CASCADE, primary_key=True, related_name="content", serialize=False, to="kb.document")),
    migrations.AlterField("chunk", "corpus", fk("kb.corpus", CASCADE, "+")),
    migrations.AlterField("chunk", "department", fk("tenants.department", PROTECT, "+", **OPTIONAL)),
    migrations.AlterField("chunk", "document", fk("kb.document", CASCADE, "chunks")),
    migrations.AlterField("ingestjob", "corpus", fk("kb.corpus", CASCADE, "jobs")),
    migrations.AlterField("ingestjob", "document", fk("kb.document", CASCADE, "jobs", **OPTIONAL)),
    migrations.AlterField("source", "corpus", fk("kb.corpus", CASCADE, "sources")),
    migrations.AlterField("source", "last_sync", fk("kb.sourcesync", SET_NULL, "+", **OPTIONAL)),
    migrations.AlterField("sourcesync", "source", fk("kb.source", CASCADE, "syncs")),
    migrations.AlterField("sourceitem", "source", fk("kb.source", CASCADE, "items")),
    migrations.AlterField("sourceitem", "department", fk("tenants.department", PROTECT, "+", **OPTIONAL)),
    migrations.AlterField("sourcechange", "sync", fk("kb.sourcesync", CASCADE, "changes")),
    migrations.AlterField("sourcechange", "department", fk("tenants.department", PROTECT, "+", **OPTIONAL)),
]

# (model, name, old fields, new fields)
UNIQUES = [
    ("document", "uniq_document_source", ("corpus", "source_name"), ("tenant", "corpus", "source_name")),
    ("chunk", "uniq_chunk_ordinal", ("document", "ordinal"), ("tenant", "document", "ordinal")),
    ("chunksentence", "uniq_chunk_sentence_ordinal", ("chunk", "ordinal"), ("tenant", "chunk", "ordinal")),
    ("sourceitem", "uniq_source_item_key", ("source", "key"), ("tenant", "source", "key")),
]

TABLES = [("kb_corpus", "id"), ("kb_document", "id"), ("kb_documentcontent", "document_id"), ("kb_chunk", "id"),
          ("kb_chunksentence", "id"), ("kb_embeddingcache", "id"), ("kb_ingestjob", "id"), ("kb_source", "id"),
          ("kb_sourcesync", "id"), ("kb_sourceitem", "id"), ("kb_sourcechange", "id"), ("kb_sourcegrant", "id")]


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0010_halfvec_storage"),
        ("tenants", "0008_tenant_keys"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=STATE),
        *[migrations.RemoveConstraint(model, name) for model, name, _, _ in UNIQUES],
        *[migrations.AddConstraint(model, models.UniqueConstraint(fields=new, name=name)) for model, name, _, new in UNIQUES],
        *[key_by_tenant(table, column) for table, column in TABLES],
    ]
