"""Retrieval tunables with their measured defaults (docs/retrieval.md); each may be overridden in Django settings.

Read in one place: `setting(name)`. A search reads them all once, at its start (`snapshot`, kept on its
SearchPlan as `knobs`), so its stages read one consistent set and never come back here.
"""

from __future__ import annotations

import re
from typing import Any

from tenants.conf import product_settings
from tenants.conf.product import DJANGO_ONLY

# The tunables and their measured defaults, each declared once (type, default, doc) in tenants/conf/product.py.
# Not here: RETRIEVAL_PARALLEL_WORKERS (an environment variable: the side connections a hybrid search runs BM25 on).
DEFAULTS: dict[str, Any] = {s.name: s.default for s in DJANGO_ONLY if s.name.startswith("RETRIEVAL_")}


def setting(name: str) -> Any:
    """The tunable `name` (a declared product setting): its Django setting when there is one, else its default."""
    return getattr(product_settings, name)


def snapshot() -> dict[str, Any]:
    """Every tunable, read now: {name: value}."""
    return {name: setting(name) for name in DEFAULTS}


MAX_K = 200


MAX_ARMS = 8  # a scope of more departments is not split into per-department arms (planning grows per arm)


# Lexemes a query resolves to (per language); BM25 and the sentence re-rank score its rarest
# MAX_SCORED_TERMS of them (one tf column each), not the first in the tsvector's (alphabetical)
# order, which dropped a long question's words from late in the alphabet whatever their weight.
MAX_QUERY_TERMS = 64
MAX_SCORED_TERMS = 32


# An embedding model key as SQL may inline it (statements name it for partial index predicates).
MODEL_KEY = re.compile(r"^[A-Za-z0-9._/-]+:[0-9]+$")

