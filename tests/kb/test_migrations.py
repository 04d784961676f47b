"""Data migrations on a database of their own, migrated step by step.

kb 0005 fills the new `ChunkSentence.lexemes` of sentences stored before it from their offsets into
the chunk text. Nothing else checks that backfill: the test database is created at the latest
migration, where every sentence gets its lexemes at insert. (The migration role here is a
superuser (the README asks DATABASE_URL for one, or BYPASSRLS), so row-level security does not bind it:
this checks the values, not the tenant-by-tenant loop.)
"""

from __future__ import annotations

import pytest
from django.db import connections

from tests.kb.scratch_database import migrate_to, scratch_alias  # noqa: F401  (fixture)

BEFORE = ("kb", "0004_chunk_sentences")
AFTER = ("kb", "0005_sentence_lexemes")




def _sentences_before_0005(alias: str, apps, tenant_name: str, text: str, spans: list[tuple[int, int]]) -> list[int]:
    Tenant, Corpus, Document, Chunk, Sentence = (apps.get_model(*m.split(".")) for m in (
        "tenants.Tenant", "kb.Corpus", "kb.Document", "kb.Chunk", "kb.ChunkSentence"))
    tenant = Tenant.objects.using(alias).create(name=tenant_name, slug=tenant_name.lower())
    corpus = Corpus.objects.using(alias).create(tenant=tenant, name="Policies", embedding_model="hash:4", embedding_dim=4)
    document = Document.objects.using(alias).create(tenant=tenant, corpus=corpus, title="Travel", source_name="travel.txt",
                                                    mime_type="text/plain", sha256="0" * 64, status="ready")
    chunk = Chunk.objects.using(alias).create(tenant=tenant, corpus=corpus, document=document, ordinal=0, text=text,
                                              char_start=0, char_end=len(text), token_count=len(text.split()),
                                              content_hash="1" * 64, embedding=[0.5, 0.5, 0.5, 0.5], embedding_model="hash:4")
    return [Sentence.objects.using(alias).create(tenant=tenant, chunk=chunk, ordinal=i, char_start=s, char_end=e,
                                                 embedding=[0.5, 0.5, 0.5, 0.5], embedding_model="hash:4").pk
            for i, (s, e) in enumerate(spans)]


@pytest.mark.tenantless_sql("reads every tenant's rows as the owner to check what a migration wrote")
def test_0005_fills_the_lexemes_of_every_tenants_sentences_from_their_offsets(scratch_alias):  # noqa: F811  (the fixture)
    alias = scratch_alias
    apps = migrate_to(alias, BEFORE)
    travel = "Read this first. Hotels are reimbursed up to 180 euros a night."
    leave = "Leave rules. Parental leave lasts sixteen weeks."
    acme = _sentences_before_0005(alias, apps, "Acme", travel, [(0, 16), (17, len(travel))])
    globex = _sentences_before_0005(alias, apps, "Globex", leave, [(13, len(leave))])

    migrate_to(alias, AFTER)

    with connections[alias].cursor() as cur:
        cur.execute("SELECT id, lexemes FROM kb_chunksentence ORDER BY id")
        lexemes = {pk: sorted(values) for pk, values in cur.fetchall()}
        cur.execute("SELECT current_setting('app.tenant_id', true)")
        (tenant_setting,) = cur.fetchone()
    # Exactly each sentence's span: an offset one off would give "otels" or lose "read".
    assert lexemes[acme[0]] == ["first", "read"]
    assert lexemes[acme[1]] == ["180", "euro", "hotel", "night", "reimburs"]
    assert lexemes[globex[0]] == ["last", "leav", "parent", "sixteen", "week"]
    assert not tenant_setting  # the tenant setting the backfill used does not outlive it
