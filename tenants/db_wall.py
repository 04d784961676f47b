"""The database wall's proofs: the tenant (and, for sign-in look-ups, the user) that a transaction acts for,
signed by this process so that SQL run as the application role cannot name another one.

Row-level security (tenants.rls) accepts a tenant only through `grounded_tenant()`, a SECURITY DEFINER
function that checks `app.tenant_proof` against `app.tenant_id`: `<expiry epoch>.<hex HMAC-SHA256 of
"tenant:<id>:<expiry>">` under the wall key. The key comes from DATABASE_WALL_KEY (hex, at least 32
bytes) or the file DATABASE_WALL_KEY_FILE (created once, mode 0600); `migrate` copies it into the
database (`install_key`, run by the post-migrate hook) as the two HMAC pads, in the schema
`grounded_private`, which the application role cannot use. Both settings are sent as `SET LOCAL`
statements (`tenant_statements`), so they last to the end of the transaction (or of a multi-statement
script outside one) and a distributed PostgreSQL passes them on to its workers.

A proof is valid until its expiry, compared with the transaction's start (`now()`), so a proof valid
when a transaction starts holds for all of it. Proofs are minted for PROOF_LIFETIME_S and reused by this
process for at most PROOF_REUSE_S of that, so one a transaction starts with has at least
PROOF_LIFETIME_S - PROOF_REUSE_S left (the margin for a database clock ahead of ours).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from pathlib import Path

from django.db import DatabaseError, connections

from tenants.conf import product_settings

PROOF_LIFETIME_S = 300
PROOF_REUSE_S = 120
KEY_BYTES = 32
_BLOCK = 64  # SHA-256's block size: keys up to it are zero-padded (RFC 2104), longer ones hashed first

TENANT, USER, GRANT = "tenant", "user", "grant"

_lock = threading.Lock()
_key: bytes | None = None
_proofs: dict[tuple[str, int], tuple[float, str]] = {}  # (purpose, subject) -> (reuse until, proof)


class WallKeyError(RuntimeError):
    """DATABASE_WALL_KEY is not hex of at least KEY_BYTES bytes, or the key file holds no such key."""


def _parse_key(text: str, where: str) -> bytes:
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise WallKeyError(f"{where}: the database wall key must be hex") from None
    if len(key) < KEY_BYTES:
        raise WallKeyError(f"{where}: the database wall key must be at least {KEY_BYTES} bytes ({2 * KEY_BYTES} hex digits)")
    return key


def _read_key() -> bytes:
    """DATABASE_WALL_KEY, else the file DATABASE_WALL_KEY_FILE, created with a random key (mode 0600) if missing."""
    if product_settings.DATABASE_WALL_KEY:
        return _parse_key(product_settings.DATABASE_WALL_KEY, "DATABASE_WALL_KEY")
    path = Path(product_settings.DATABASE_WALL_KEY_FILE)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process created it meanwhile: read theirs
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(KEY_BYTES) + "\n")
    return _parse_key(path.read_text(), str(path))


def wall_key() -> bytes:
    """This process's wall key, read once (a rotated key takes effect in a process after its restart)."""
    global _key
    if _key is None:
        with _lock:
            if _key is None:
                _key = _read_key()
    return _key


def reset() -> None:
    """Forget the key and the cached proofs (tests that change the key; a settings change)."""
    global _key
    with _lock:
        _key = None
        _proofs.clear()


def pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC-SHA256's inner and outer padded keys (K' xor ipad, K' xor opad), what the database stores: with
    them it computes the HMAC with its built-in sha256() alone."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def sign(purpose: str, subject: int, expiry: int, key: bytes | None = None) -> str:
    """The proof `<expiry>.<hex mac>` for `subject` (a tenant or user id) under `purpose`."""
    message = f"{purpose}:{int(subject)}:{int(expiry)}".encode()
    return f"{int(expiry)}.{hmac.new(key or wall_key(), message, hashlib.sha256).hexdigest()}"


def proof(purpose: str, subject: int) -> str:
    """A proof for `subject` valid for at least PROOF_LIFETIME_S - PROOF_REUSE_S seconds more."""
    now = time.time()
    cached = _proofs.get((purpose, subject))
    if cached is not None and cached[0] > now:
        return cached[1]
    signed = sign(purpose, subject, int(now) + PROOF_LIFETIME_S)
    _proofs[(purpose, subject)] = (now + PROOF_REUSE_S, signed)
    return signed


def _statements(purpose: str, subject: int | None) -> str:
    # Formatted from an int and hex digits only: nothing a caller passes reaches the SQL text.
    if subject is None:
        return f"SET LOCAL app.{purpose}_id = ''; SET LOCAL app.{purpose}_proof = ''"
    subject = int(subject)
    if subject <= 0:
        raise ValueError(f"a {purpose} id is a positive integer")
    return f"SET LOCAL app.{purpose}_id = '{subject}'; SET LOCAL app.{purpose}_proof = '{proof(purpose, subject)}'"


def tenant_statements(tenant_id: int | None) -> str:
    """SET LOCAL statements (no trailing semicolon) that make `tenant_id` the transaction's RLS tenant; None: no tenant."""
    return _statements(TENANT, tenant_id)


def user_statements(user_id: int | None) -> str:
    """SET LOCAL statements that let the transaction look up `user_id`'s own tenants (grounded_user_tenants); None: nobody."""
    return _statements(USER, user_id)


def grant_statements(tenant_id: int | None) -> str:
    """SET LOCAL statements that let the application role write `tenant_id`'s source grants (kb 0009's
    operator-only trigger); None: no tenant's. No request path sends them: operators grant through the owner
    connection; tests that must write grants inside their own transaction do."""
    return _statements(GRANT, tenant_id)


def install_key(using: str = "owner") -> bool:
    """Store this process's wall key's pads in the database (as its owner), replacing any other.
    False when the wall's table does not exist yet (a database migrated to before it)."""
    inner, outer = pads(wall_key())
    with connections[using].cursor() as cur:
        cur.execute("SELECT to_regclass('grounded_private.wall_key')")
        if cur.fetchone()[0] is None:
            return False
        cur.execute("INSERT INTO grounded_private.wall_key (id, k_ipad, k_opad) VALUES (1, %s, %s) "
                    "ON CONFLICT (id) DO UPDATE SET k_ipad = EXCLUDED.k_ipad, k_opad = EXCLUDED.k_opad "
                    "WHERE (wall_key.k_ipad, wall_key.k_opad) IS DISTINCT FROM (EXCLUDED.k_ipad, EXCLUDED.k_opad)",
                    [inner, outer])
    return True


def key_matches(using: str = "default") -> bool:
    """Whether the database accepts this process's proofs (the key `migrate` installed is this process's).
    Raises DatabaseError where the wall is not installed (a database not migrated yet)."""
    conn = connections[using]
    conn.ensure_connection()
    check = f"{tenant_statements(1)}; SELECT grounded_tenant()"
    autocommit = conn.get_autocommit()
    undo = "ROLLBACK" if autocommit else "ROLLBACK TO SAVEPOINT wall_check; RELEASE SAVEPOINT wall_check"
    with conn.cursor() as cur:  # a transaction or savepoint of its own, rolled back: nothing stays set
        try:
            cur.execute(f"BEGIN; {check}; {undo}" if autocommit else f"SAVEPOINT wall_check; {check}; {undo}")
        except DatabaseError:  # e.g. no grounded_tenant() yet (not migrated): the script stopped half way
            cur.execute(undo)
            raise
        raw = getattr(cur, "cursor", cur)
        row = None
        while True:
            if raw.description is not None:
                row = raw.fetchone()
            if not raw.nextset():
                break
    return bool(row and row[0] == 1)
