"""Chain digests: each tenant's chain tip, signed with a key that is not in the database, kept outside it.

The hash chain (agents.chain) detects a run changed in place, but someone with the database owner's
rights can rewrite a chain consistently (recompute every hash after an edit) or delete its newest
runs, and the chain alone cannot tell. A digest anchors the chain outside the database, as AWS
CloudTrail's digest files anchor its logs:

    {"version": 2, "tenant_id": 3, "tenant_slug": "kestrel", "seq": 41, "hash": "<run 41's hash>",
     "runs_from": 38, "run_hashes": ["<run 38's hash>", "<run 39's>", "<run 40's>", "<run 41's>"],
     "signed_at": "2026-12-03T17:00:00+00:00", "previous_digest": "<sha256 of this tenant's previous digest file>",
     "key_id": "<sha256 of the public key, 16 hex>", "signature": "<base64 Ed25519 signature>"}

The signature covers the canonical JSON of every other field. `run_hashes` lists the hash of every
run since the tenant's previous digest (as CloudTrail's digests list each log file they cover), so a
rewrite is located at the exact run; version-1 digests, which sign the tip alone, locate it only
between two digests. Digests are written per tenant to
`CHAIN_DIGEST_DIR/<tenant id>/<seq, 12 digits>-<UTC time>.json` by `manage.py write_chain_digests`
(on demand; `scripts/run` at start and on shutdown), and every CHAIN_DIGEST_INTERVAL_S (default 300 s)
by the Celery beat entry `agents.write_chain_digests` or, without a worker, by `manage.py
write_chain_digests --loop` (digest_loop); the periodic ones only for tenants whose tip moved. Runs
newer than a tenant's newest digest are not covered: the period bounds how long a deletion of recent
runs can go unseen. Copy the folder anywhere (a bucket with object lock is the production choice). The Ed25519 key is
CHAIN_SIGNING_KEY (base64 of the 32-byte private key) or the file CHAIN_SIGNING_KEY_FILE, created
once with mode 0600 when neither is set. `verify_digests` checks each digest's signature against
the public key (a digest signed with another key is rejected) and the database against each digest:
a digest's run must still exist with the same hash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.db import close_old_connections
from django.db.models import QuerySet

from agents.chain import GENESIS
from agents.models import Run
from tenants.conf import product_settings
from tenants.models import Tenant

DIGEST_VERSION = 2
logger = logging.getLogger(__name__)


def signing_key() -> Ed25519PrivateKey:
    """The configured private key: CHAIN_SIGNING_KEY, else CHAIN_SIGNING_KEY_FILE (created once, 0600)."""
    if product_settings.CHAIN_SIGNING_KEY:
        return Ed25519PrivateKey.from_private_bytes(base64.b64decode(product_settings.CHAIN_SIGNING_KEY))
    path = Path(product_settings.CHAIN_SIGNING_KEY_FILE)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                                         serialization.NoEncryption())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(base64.b64encode(raw).decode())
    return Ed25519PrivateKey.from_private_bytes(base64.b64decode(path.read_text().strip()))


def public_key_pem(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def load_public_key(pem: str) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(pem.encode())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(public_key_pem(public).encode()).hexdigest()[:16]


def _signed_bytes(digest: dict) -> bytes:
    body = {k: v for k, v in digest.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def write_digest(tenant_id: int, tenant_slug: str, folder: Path | str | None = None, *, using: str = "owner",
                 changed_only: bool = False) -> Path | None:
    """Sign tenant `tenant_id`'s chain tip now and write it as a new file; returns its path. With
    `changed_only`, nothing (None) when the tenant's newest digest already signs this tip (seq and hash).

    Reads as the owner (a maintenance read across RLS). A tenant with no runs gets seq 0 and the
    genesis hash, so removing every run is detected too."""
    folder = Path(folder or product_settings.CHAIN_DIGEST_DIR)
    runs = Run.objects.unscoped_dangerously(using).filter(tenant_id=tenant_id)
    tip = runs.order_by("-seq").values_list("seq", "hash").first()
    seq, tip_hash = tip if tip else (0, GENESIS)
    tenant_dir = folder / str(tenant_id)
    tenant_dir.mkdir(parents=True, exist_ok=True)
    earlier = sorted(tenant_dir.glob("*.json"))
    if changed_only and earlier and _signs(earlier[-1], seq, tip_hash):
        return None
    key = signing_key()
    runs_from = int(earlier[-1].name[:12]) + 1 if earlier else 1  # a digest's file name starts with its seq
    now = datetime.now(UTC)
    digest = {"version": DIGEST_VERSION, "tenant_id": tenant_id, "tenant_slug": tenant_slug, "seq": seq, "hash": tip_hash,
              "runs_from": runs_from,
              "run_hashes": list(runs.filter(seq__gte=runs_from, seq__lte=seq).order_by("seq").values_list("hash", flat=True)),
              "signed_at": now.isoformat(), "key_id": key_id(key.public_key()),
              "previous_digest": hashlib.sha256(earlier[-1].read_bytes()).hexdigest() if earlier else ""}
    digest["signature"] = base64.b64encode(key.sign(_signed_bytes(digest))).decode()
    path = tenant_dir / f"{seq:012d}-{now.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    path.write_text(json.dumps(digest, indent=1, sort_keys=True))
    (folder / "public_key.pem").write_text(public_key_pem(key))
    return path


def _signs(digest_file: Path, seq: int, tip_hash: str) -> bool:
    """Whether `digest_file` signs this tip (seq and hash); its name starts with its seq."""
    if int(digest_file.name[:12]) != seq:
        return False
    try:
        return json.loads(digest_file.read_bytes()).get("hash") == tip_hash
    except ValueError:
        return False


def write_all_digests(folder: Path | str | None = None, *, changed_only: bool = False) -> list[Path]:
    """A digest for every tenant (what `manage.py write_chain_digests`, the beat schedule and the digest loop
    run). `changed_only`: skip a tenant whose newest digest already signs its current tip (seq and hash), so a
    schedule every few minutes adds a file only when the chain moved; a tenant with no digest yet gets one."""
    folder = Path(folder or product_settings.CHAIN_DIGEST_DIR)
    written = (write_digest(t.id, t.slug, folder, changed_only=changed_only) for t in Tenant.objects.using("owner").order_by("id"))
    return [path for path in written if path is not None]


def digest_loop(interval_s: float, stop: threading.Event, folder: Path | str | None = None,
                on_round: Callable[[list[Path]], None] | None = None) -> int:
    """Write changed digests (write_all_digests) at once and then every `interval_s` seconds until `stop` is
    set; returns the rounds run. A failed round (the database restarting) is logged and retried next period.
    The schedule of a run without Celery beat (`manage.py write_chain_digests --loop`, started by
    `scripts/run` in eager mode); with a worker, beat runs the task `agents.write_chain_digests` instead."""
    rounds = 0
    while not stop.is_set():
        try:
            written = write_all_digests(folder, changed_only=True)
        except Exception:  # a round that fails must not end the schedule
            logger.exception("writing chain digests failed; retrying in %s s", interval_s)
            written = []
        finally:
            close_old_connections()
        rounds += 1
        if on_round is not None:
            on_round(written)
        stop.wait(interval_s)
    return rounds


@dataclass(frozen=True)
class DigestProblem:
    tenant_id: int
    path: str
    seq: int | None  # the first bad sequence number where one can be named
    reason: str

    def __str__(self) -> str:
        at = f" (first bad seq {self.seq})" if self.seq is not None else ""
        return f"tenant {self.tenant_id}: {Path(self.path).name}{at}: {self.reason}"


@dataclass(frozen=True)
class DigestReport:
    tenant_id: int
    digests_checked: int
    problems: list[DigestProblem]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_digests(tenant_id: int, folder: Path | str, public: Ed25519PublicKey, *, using: str = "owner") -> DigestReport:
    """Check tenant `tenant_id`'s digests in `folder` against `public` and the database.

    Per digest, in sequence order: its signature must verify with `public` (else it was signed with
    another key or altered), it must link to the digest before it, and the run it names must still
    exist with the signed hash: a missing run means runs were removed (the first missing seq is
    named), a different hash means the chain was rewritten at or before that seq."""
    files = sorted((Path(folder) / str(tenant_id)).glob("*.json"))
    problems: list[DigestProblem] = []
    runs = Run.objects.unscoped_dangerously(using).filter(tenant_id=tenant_id)
    newest = runs.order_by("-seq").values_list("seq", flat=True).first() or 0
    previous_bytes: bytes | None = None
    last_good_seq = 0
    for path in files:
        raw = path.read_bytes()
        try:
            digest = json.loads(raw)
            public.verify(base64.b64decode(digest["signature"]), _signed_bytes(digest))
        except (InvalidSignature, ValueError, KeyError, TypeError):
            problems.append(DigestProblem(tenant_id, str(path), None,
                                          "the signature does not verify with this public key (signed with another key, or altered)"))
            previous_bytes = raw
            continue
        if previous_bytes is not None and digest.get("previous_digest") != hashlib.sha256(previous_bytes).hexdigest():
            problems.append(DigestProblem(tenant_id, str(path), None, "does not link to the digest before it (a digest was removed)"))
        previous_bytes = raw
        seq, signed_hash = int(digest["seq"]), digest["hash"]
        if digest["tenant_id"] != tenant_id:
            problems.append(DigestProblem(tenant_id, str(path), None, f"names tenant {digest['tenant_id']}"))
            continue
        if seq == 0:
            continue
        if bad := _first_listed_mismatch(digest, runs):
            bad_seq, why = bad
            problems.append(DigestProblem(tenant_id, str(path), bad_seq, why))
            continue
        found = runs.filter(seq=seq).values_list("hash", flat=True).first()
        if found is None:
            problems.append(DigestProblem(tenant_id, str(path), newest + 1,
                                          f"run seq {seq} signed at {digest['signed_at']} is gone: the newest run now is seq "
                                          f"{newest}, so runs {newest + 1}-{seq} were removed"))
        elif found != signed_hash:
            problems.append(DigestProblem(tenant_id, str(path), last_good_seq + 1,
                                          f"run seq {seq} no longer has the hash signed at {digest['signed_at']}: the chain was "
                                          f"rewritten between seq {last_good_seq + 1} and {seq}"))
        else:
            last_good_seq = seq
    return DigestReport(tenant_id, len(files), problems)


def _first_listed_mismatch(digest: dict, runs: QuerySet[Run]) -> tuple[int, str] | None:
    """The first run a version-2 digest lists whose hash the database no longer has, and why; None
    when every listed run is there unchanged (or the digest lists none)."""
    listed = digest.get("run_hashes")
    if not isinstance(listed, list) or not listed:
        return None
    start = int(digest["runs_from"])
    stored = dict(runs.filter(seq__gte=start, seq__lt=start + len(listed)).values_list("seq", "hash"))
    for seq, signed in enumerate(listed, start):
        if seq not in stored:
            newest = runs.order_by("-seq").values_list("seq", flat=True).first() or 0
            return seq, (f"run seq {seq} signed at {digest['signed_at']} is gone: the newest run now is seq {newest}, "
                         f"so runs {seq}-{digest['seq']} were removed" if newest < seq else
                         f"run seq {seq} signed at {digest['signed_at']} is gone (deleted from the middle of the chain)")
        if stored[seq] != signed:
            return seq, f"run seq {seq} no longer has the hash signed at {digest['signed_at']}: the chain was rewritten from seq {seq}"
    return None
