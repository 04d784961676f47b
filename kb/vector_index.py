"""One partial HNSW index per embedding model on the shared, untyped `kb_chunk.embedding` column.

`kb_chunk.embedding` holds vectors of several models and dimensions, so no index can cover the
column as such. Each model gets an expression index over the rows tagged with its key:

    CREATE INDEX chunk_hnsw_<model>_<dim> ON kb_chunk
        USING hnsw ((embedding::vector(<dim>)) vector_cosine_ops) WHERE embedding_model = '<key>'

pgvector's HNSW takes `vector` up to 2,000 dimensions; larger models (gemini 3072-d) are indexed as
`halfvec(<dim>)` (up to 4,000), half precision being plenty for ranking. A query uses the index
only when it repeats the same expression and predicate: see `distance_sql`.
"""

from __future__ import annotations

import hashlib
import logging
import re

from django.db import OperationalError, connections, transaction

logger = logging.getLogger(__name__)

VECTOR_MAX_DIM = 2000
HALFVEC_MAX_DIM = 4000
_created: set[tuple[str, str, int]] = set()  # (database, key, dim) known to exist in this process


def index_name(model_key: str) -> str:
    """Deterministic name, e.g. 'minilm-l6-v2:384' -> 'chunk_hnsw_minilm_l6_v2_384' (max 63 chars)."""
    slug = re.sub(r"[^a-z0-9]+", "_", model_key.lower()).strip("_")
    name = f"chunk_hnsw_{slug}"
    if len(name) > 63:
        name = f"{name[:50]}_{hashlib.sha256(model_key.encode()).hexdigest()[:12]}"
    return name


def cast_type(dim: int) -> str:
    """The SQL type a model's vectors are cast to for indexing and search: vector(d) or halfvec(d)."""
    if not 1 <= dim <= HALFVEC_MAX_DIM:
        raise ValueError(f"cannot index {dim}-d vectors (HNSW supports up to {HALFVEC_MAX_DIM} as halfvec)")
    return f"vector({dim})" if dim <= VECTOR_MAX_DIM else f"halfvec({dim})"


def distance_sql(dim: int, column: str = "embedding", param: str = "%s") -> str:
    """Cosine distance expression matching the index, e.g. `(embedding::vector(384)) <=> %s::vector(384)`.

    Use it with `WHERE embedding_model = <key>` so the planner picks the model's partial index.
    """
    typ = cast_type(dim)
    return f"({column}::{typ}) <=> {param}::{typ}"


def ensure_vector_index(model_key: str, dim: int, *, using: str = "owner", lock_timeout_s: int = 5) -> str:
    """Create the model's HNSW index if it does not exist yet; returns its name. Idempotent, cheap when present.

    Runs on the owner connection. Outside a transaction it builds CONCURRENTLY (ingestion keeps
    writing); inside one (tests) a plain build, bounded by lock_timeout so it can never wait forever
    on a writer. An index that could not be built now is logged, not raised: search stays correct
    (exact scan) and the next call tries again.
    """
    name = index_name(model_key)
    typ = cast_type(dim)
    conn = connections[using]
    marker = (conn.settings_dict["NAME"], model_key, dim)
    if marker in _created:
        return name
    opclass = "vector_cosine_ops" if typ.startswith("vector") else "halfvec_cosine_ops"
    quoted_key = model_key.replace("'", "''")
    concurrently = "" if conn.in_atomic_block else "CONCURRENTLY "
    sql = (f'CREATE INDEX {concurrently}IF NOT EXISTS "{name}" ON kb_chunk USING hnsw '
           f"((embedding::{typ}) {opclass}) WHERE embedding_model = '{quoted_key}'")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s", [name])
            row = cur.fetchone()
            if row is None or not row[0]:
                if conn.in_atomic_block:
                    with transaction.atomic(using=using):
                        cur.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout_s)}s'")
                        if row is not None:
                            cur.execute(f'DROP INDEX IF EXISTS "{name}"')
                        cur.execute(sql)
                else:
                    cur.execute(f"SET lock_timeout = '{int(lock_timeout_s * 12)}s'")
                    try:
                        if row is not None:  # a failed CONCURRENTLY build leaves an INVALID index behind
                            cur.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                        cur.execute(sql)
                    finally:
                        cur.execute("RESET lock_timeout")
    except OperationalError as exc:
        logger.warning("vector index %s not built now (%s); search falls back to exact scan", name, exc)
        return name
    _created.add(marker)
    return name
