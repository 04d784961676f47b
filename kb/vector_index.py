"""One partial HNSW index per embedding model on the shared, untyped `kb_chunk.embedding` column.

`kb_chunk.embedding` holds vectors of several models and dimensions, so no index can cover the
column as such. Each model gets an expression index over the rows tagged with its key:

    CREATE INDEX chunk_hnsw_<model>_<dim> ON kb_chunk
        USING hnsw ((embedding::halfvec(<dim>)) halfvec_cosine_ops) WHERE embedding_model = '<key>'

The column stores `halfvec` (2-byte floats, kb migration 0010) and every index is on `halfvec(<dim>)`
(pgvector's HNSW takes halfvec up to 4,000 dimensions): half the bytes of `vector`, same recall at
the measured sizes (docs/scaling.md, "Growth"). A query uses the index only when it repeats the
same expression and predicate: see `distance_sql`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time

from django.db import DatabaseError, OperationalError, connections, transaction

from tenants.conf import product_settings
from tenants.db_wall import tenant_statements
from tenants.scope import across_tenants

logger = logging.getLogger(__name__)

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
    """The SQL type a model's vectors are cast to for indexing and search: halfvec(d), as stored."""
    if not 1 <= dim <= HALFVEC_MAX_DIM:
        raise ValueError(f"cannot index {dim}-d vectors (HNSW supports up to {HALFVEC_MAX_DIM} as halfvec)")
    return f"halfvec({int(dim)})"


def opclass(dim: int) -> str:
    """The HNSW operator class of a model's index (cosine distance on `cast_type(dim)`)."""
    return "halfvec_cosine_ops" if cast_type(dim).startswith("halfvec") else "vector_cosine_ops"


def distance_sql(dim: int, column: str = "embedding", param: str = "%s") -> str:
    """Cosine distance expression matching the index, e.g. `(embedding::halfvec(384)) <=> %s::halfvec(384)`.

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
        ensure_scope_indexes(model_key, dim, using=using, lock_timeout_s=lock_timeout_s)
        return name
    ops = opclass(dim)
    quoted_key = model_key.replace("'", "''")
    concurrently = "" if conn.in_atomic_block else "CONCURRENTLY "
    sql = (f'CREATE INDEX {concurrently}IF NOT EXISTS "{name}" ON kb_chunk USING hnsw '
           f"((embedding::{typ}) {ops}) WHERE embedding_model = '{quoted_key}'")
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
    ensure_scope_indexes(model_key, dim, using=using, lock_timeout_s=lock_timeout_s)
    return name


# --- Scope indexes: one partial HNSW index per large tenant and per large department -------------
#
# A filtered scan of the model's index visits about k / selectivity tuples and checks each against
# the heap, so a scope holding a tenth of the index costs about ten unfiltered scans (docs/retrieval.md,
# "Scope indexes"). A scope with its own partial index is scanned unfiltered.
# kb.retrieval finds these indexes by their predicate and chooses per query among them. Which scopes get one:
# VECTOR_SCOPE_INDEX_MIN_ROWS and VECTOR_SCOPE_INDEX_MAX_SHARE (product settings, tenants/conf/product.py).

SCOPE_CHECK_INTERVAL_S = 300
_scope_checked: dict[tuple[str, str], float] = {}


def scope_index_name(model_key: str, tenant_id: int, department_id: int | None | str = "all") -> str:
    """'chunk_hnsw_<model>_t<tenant>' or '..._t<tenant>_d<dept>' ('_dnone': the tenant-wide rows), at most 63 chars."""
    suffix = f"_t{int(tenant_id)}" + ("" if department_id == "all" else
                                        "_dnone" if department_id is None else f"_d{int(department_id)}")
    base = index_name(model_key)
    return f"{base[:63 - len(suffix)]}{suffix}"


def scope_predicate(model_key: str, tenant_id: int, department_id: int | None | str = "all") -> str:
    """The partial-index predicate of a scope index (ids are integers, the key is quoted)."""
    quoted_key = model_key.replace("'", "''")
    pred = f"embedding_model = '{quoted_key}' AND tenant_id = {int(tenant_id)}"
    if department_id == "all":
        return pred
    return pred + (" AND department_id IS NULL" if department_id is None else f" AND department_id = {int(department_id)}")


def scope_sizes(model_key: str, using: str = "owner") -> dict[tuple[int, int | None], int]:
    """(tenant, department or None for tenant-wide) -> chunk rows of the model, from stored corpus counts.

    Read as the owner; where that role is subject to row-level security (not a superuser), one
    tenant at a time under its own RLS setting.
    """
    name, _, dim = model_key.rpartition(":")
    sql = ("SELECT tenant_id, department_id, sum(chunk_count) FROM kb_corpus WHERE embedding_model = %s "
           "AND embedding_dim = %s GROUP BY 1, 2")
    out: dict[tuple[int, int | None], int] = {}
    conn = connections[using]
    with transaction.atomic(using=using), conn.cursor() as cur:
        cur.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user")
        row = cur.fetchone()
        if row and row[0]:
            with across_tenants("maintenance: the vector index sizes every tenant's scopes"):
                cur.execute(sql, [name, int(dim)])
            rows = cur.fetchall()
        else:
            cur.execute("SELECT id FROM tenants_tenant")
            rows = []
            one_tenant = sql.replace(" GROUP BY", " AND tenant_id = %s GROUP BY")
            for (tenant_id,) in cur.fetchall():
                cur.execute(tenant_statements(int(tenant_id)))
                cur.execute(one_tenant, [name, int(dim), int(tenant_id)])
                rows += cur.fetchall()
    for tenant_id, department_id, n in rows:
        out[(int(tenant_id), department_id)] = int(n or 0)
    return out


def wanted_scope_indexes(sizes: dict[tuple[int, int | None], int], min_rows: int,
                         max_share: float) -> list[tuple[int, int | None | str]]:
    """Which scopes get their own index: at least `min_rows` rows and at most `max_share` of the parent.

    Tenant indexes (department "all") for tenants that are a minority of the model's rows;
    department indexes (None = the tenant-wide rows) for departments that are a minority of their
    tenant. A scope that is most of its parent gains little: the parent's scan is barely filtered.
    """
    total = sum(sizes.values())
    per_tenant: dict[int, int] = {}
    for (tenant_id, _), n in sizes.items():
        per_tenant[tenant_id] = per_tenant.get(tenant_id, 0) + n
    out: list[tuple[int, int | None | str]] = []
    for tenant_id, n in sorted(per_tenant.items()):
        if n >= min_rows and n <= max_share * total:
            out.append((tenant_id, "all"))
    for (tenant_id, department_id), n in sorted(sizes.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        if n >= min_rows and n <= max_share * per_tenant[tenant_id]:
            out.append((tenant_id, department_id))
    return out


def ensure_scope_indexes(model_key: str, dim: int, *, using: str = "owner", force: bool = False,
                         lock_timeout_s: int = 5) -> list[str]:
    """Create the partial HNSW indexes of the model's large tenants and departments that are missing.

    Checked at most every SCOPE_CHECK_INTERVAL_S per process and model (ingestion calls it through
    ensure_vector_index); `force` checks now. Returns the names of the indexes built. Indexes of
    scopes that shrank are kept (harmless: search picks by cost). Built like the model's index:
    CONCURRENTLY outside a transaction, bounded by lock_timeout inside one.
    """
    conn = connections[using]
    key = (conn.settings_dict["NAME"], model_key)
    now = time.monotonic()
    if not force and now - _scope_checked.get(key, -math.inf) < SCOPE_CHECK_INTERVAL_S:
        return []
    _scope_checked[key] = now
    typ = cast_type(dim)
    ops = opclass(dim)
    min_rows = int(product_settings.VECTOR_SCOPE_INDEX_MIN_ROWS)
    max_share = float(product_settings.VECTOR_SCOPE_INDEX_MAX_SHARE)
    built: list[str] = []
    try:
        wanted = wanted_scope_indexes(scope_sizes(model_key, using), min_rows, max_share)
        if not wanted:
            return built
        with conn.cursor() as cur:
            cur.execute("SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                        "WHERE i.indrelid = 'kb_chunk'::regclass")
            existing = dict(cur.fetchall())
            for tenant_id, department_id in wanted:
                name = scope_index_name(model_key, tenant_id, department_id)
                if existing.get(name):
                    continue
                body = (f'"{name}" ON kb_chunk USING hnsw ((embedding::{typ}) {ops}) '
                        f"WHERE {scope_predicate(model_key, tenant_id, department_id)}")
                t = time.perf_counter()
                if conn.in_atomic_block:
                    with transaction.atomic(using=using):
                        cur.execute(f"SET LOCAL lock_timeout = '{int(lock_timeout_s)}s'")
                        if name in existing:
                            cur.execute(f'DROP INDEX IF EXISTS "{name}"')
                        cur.execute(f"CREATE INDEX IF NOT EXISTS {body}")
                else:
                    cur.execute(f"SET lock_timeout = '{int(lock_timeout_s * 12)}s'")
                    try:
                        if name in existing:  # invalid leftover of a failed concurrent build
                            cur.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                        cur.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {body}")
                    finally:
                        cur.execute("RESET lock_timeout")
                logger.info("scope vector index %s built in %.1fs", name, time.perf_counter() - t)
                built.append(name)
    except DatabaseError as exc:  # never fails the ingestion that triggered the check
        logger.warning("scope vector indexes for %s not (all) built now (%s); search stays correct", model_key, exc)
        _scope_checked.pop(key, None)
    return built


if __name__ == "__main__":  # python -m kb.vector_index ensure-scopes MODEL:DIM ...
    import os
    import sys

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
    django.setup()
    if len(sys.argv) < 3 or sys.argv[1] != "ensure-scopes":
        sys.exit("usage: python -m kb.vector_index ensure-scopes MODEL:DIM [MODEL:DIM ...]")
    for model_key in sys.argv[2:]:
        ensure_vector_index(model_key, int(model_key.rpartition(":")[2]))
        print(model_key, ensure_scope_indexes(model_key, int(model_key.rpartition(":")[2]), force=True))
