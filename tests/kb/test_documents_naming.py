"""kb.retrieval.documents_naming: how many of the documents a caller sees name a name, counted under
the caller's scope (another department's and another tenant's documents neither count nor show)."""

from __future__ import annotations

import pytest

from kb.retrieval import documents_naming
from tests.factories import department, dept_scope, make_chunk, make_corpus, make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


@pytest.fixture
def kestrel():
    tenant = make_tenant("Kestrel")
    sales = department(tenant, "Sales")
    wide = make_corpus(tenant, "Handbook")
    make_chunk(wide, "Kestrel staff book trains in second class.", title="Travel")
    make_chunk(wide, "Orla Vance of Kestrel approves every exception.", title="Travel")  # a second chunk of the same document
    make_chunk(wide, "Kestrel gives 28 days of annual leave.", title="Leave")
    make_chunk(wide, "Laptops are encrypted.", title="Security")
    make_chunk(wide, "Minutes of the March meeting.", title="Minutes")
    secret = make_corpus(tenant, "Deals", sales)
    make_chunk(secret, "Orla Vance signed the Nordyard deal.", title="Deal 1")
    other = make_corpus(make_tenant("Nordyard", departments=()), "Policies")
    for i in range(3):
        make_chunk(other, f"Orla Vance visited Kestrel, note {i}.", title=f"Note {i}")
    return tenant, wide, secret


def test_the_share_of_the_documents_the_caller_sees_that_name_it(kestrel):
    tenant, wide, secret = kestrel
    reader = dept_scope(tenant)  # no department: the tenant-wide corpus only (4 documents)
    shares = documents_naming(reader, ["Kestrel", "orla vance", "Nordyard", "  ", "Kestrel"])
    # Case-insensitive; a document naming it twice counts once; blank and repeated names are dropped.
    assert shares == {"Kestrel": 2 / 4, "orla vance": 1 / 4, "Nordyard": 0.0}
    # Sales sees its deal too: one more document, which names Orla Vance and Nordyard.
    assert documents_naming(dept_scope(tenant, "Sales"), ["Orla Vance", "Nordyard"]) == {"Orla Vance": 2 / 5, "Nordyard": 1 / 5}
    # Narrowed to corpora: only within what the scope sees (the deals corpus is not the reader's).
    assert documents_naming(reader, ["Orla Vance"], corpus_ids=[secret.id]) == {"Orla Vance": 0.0}
    assert documents_naming(whole_tenant(tenant), ["Orla Vance"], corpus_ids=[wide.id]) == {"Orla Vance": 1 / 4}
