"""How common a name is among the documents a caller can see: `documents_naming`.

A reader of retrieved passages sometimes needs to tell what a passage is about from what every
document says (a company's own name stands in each of its policies). This counts, within the
caller's scope (its tenant and departments, under row-level security) and the corpora asked for,
the ready documents having a chunk whose text names each name (case-insensitive), as a share of
all those documents. It reads no chunk's text out: only counts leave the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db.models import Count, Q

from kb.access import visible_chunks, visible_documents
from kb.models import DocumentStatus
from tenants.scope import Scope, activate

__all__ = ["documents_naming"]

MAX_NAMES = 20  # names counted per call: a caller asks about a few candidates, never a vocabulary


def documents_naming(scope: Scope, names: Sequence[str], corpus_ids: Iterable[int] | None = None) -> dict[str, float]:
    """{name: the share of the ready documents `scope` sees (of `corpus_ids` when given) that some
    chunk of names it}, for the first MAX_NAMES distinct non-blank names; 0.0 for each when the scope
    sees no document. A narrowing (`corpus_ids`) can only narrow what the scope sees."""
    wanted = list(dict.fromkeys(n.strip() for n in names if n and n.strip()))[:MAX_NAMES]
    with activate(scope):
        documents = visible_documents(scope).filter(status=DocumentStatus.READY)
        if corpus_ids is not None:
            documents = documents.filter(corpus_id__in=[int(c) for c in corpus_ids])
        total = documents.count()
        if not total:
            return {n: 0.0 for n in wanted}
        if not wanted:
            return {}
        # One statement: per name, the distinct documents of the chunks naming it.
        counts = visible_chunks(scope).filter(document__in=documents).aggregate(
            **{f"n{i}": Count("document_id", distinct=True, filter=Q(text__icontains=n)) for i, n in enumerate(wanted)})
        return {n: counts[f"n{i}"] / total for i, n in enumerate(wanted)}
