"""Signed chain digests anchor each tenant's chain outside the database (agents/digests.py): removing
the newest runs, or rewriting the chain consistently (every hash recomputed), passes the chain check
but not `verify_chain --digests`; a digest signed with another key is rejected."""

from __future__ import annotations

import base64
import hashlib
import io
import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command
from django.db import connections, transaction

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.chain import run_hash
from agents.models import Citation, Run, RunStep
from agents.services import ask
from tests import query_checker
from tests.agents.conftest import make_policy_corpus
from tests.factories import make_tenant, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"], transaction=True)


@pytest.fixture
def signing(settings, tmp_path):
    raw = Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                                     serialization.NoEncryption())
    settings.CHAIN_SIGNING_KEY = base64.b64encode(raw).decode()
    settings.CHAIN_DIGEST_DIR = str(tmp_path / "digests")
    return tmp_path / "digests"


def _runs(tenant, n: int) -> list[Run]:
    return [ask(scope=whole_tenant(tenant), question=f"How much is a hotel night? ({i})", strategy="classic", provider="offline")
            for i in range(n)]


def _verify(tenant, folder, **kw) -> tuple[bool, str]:
    out = io.StringIO()
    try:
        call_command("verify_chain", tenant=tenant.slug, digests=str(folder), stdout=out, **kw)
    except CommandError:
        return False, out.getvalue()
    return True, out.getvalue()


def _owner(sql: str, params: list | None = None) -> None:
    """What the database owner (or superuser) could do: bypass the append-only triggers (and name rows
    by id alone: a forger's SQL, exempt from the tenant query checker)."""
    with query_checker.allowed("adversarial: a forger's edits as the owner"), transaction.atomic(using="owner"), \
            connections["owner"].cursor() as cur:
        cur.execute("SET LOCAL session_replication_role = replica")
        cur.execute(sql, params or [])


def _rewrite_consistently(runs: list[Run], at: int) -> None:
    """Forge runs[at]'s answer and recompute its hash and every later link, as an owner covering tracks would."""
    _owner("UPDATE agents_run SET answer = 'Hotel nights are reimbursed without limit.' WHERE id = %s", [runs[at].id])
    owner_rows = {model: model.objects.unscoped_dangerously("owner").filter(tenant_id=runs[at].tenant_id)
                  for model in (Run, RunStep, Citation)}
    prev = owner_rows[Run].get(pk=runs[at - 1].id).hash
    for run in runs[at:]:
        row = owner_rows[Run].get(pk=run.id)
        row.prev_hash = prev
        steps = list(owner_rows[RunStep].filter(run_id=run.id))
        cites = list(owner_rows[Citation].filter(run_id=run.id))
        prev = run_hash(row, steps, cites)
        _owner("UPDATE agents_run SET prev_hash = %s, hash = %s WHERE id = %s", [row.prev_hash, prev, run.id])


def test_removing_the_newest_runs_is_caught_by_the_digests_not_by_the_chain(signing):
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    runs = _runs(tenant, 4)
    call_command("write_chain_digests", stdout=io.StringIO())
    ok, out = _verify(tenant, signing)
    assert ok and "1 digest(s) match" in out, out
    for run in runs[2:]:
        _owner("DELETE FROM agents_citation WHERE run_id = %s; DELETE FROM agents_runstep WHERE run_id = %s; "
               "DELETE FROM agents_run WHERE id = %s", [run.id, run.id, run.id])
    ok, out = _verify(tenant, signing)
    assert not ok and out.count("BROKEN") == 1, out  # the chain itself still verifies: only the digest sees it
    assert "first bad seq 3" in out and "runs 3-4 were removed" in out, out


def test_a_consistently_rewritten_chain_is_caught_with_the_first_bad_seq(signing):
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    runs = _runs(tenant, 2)
    call_command("write_chain_digests", stdout=io.StringIO())
    runs += _runs(tenant, 2)
    call_command("write_chain_digests", stdout=io.StringIO())
    assert _verify(tenant, signing)[0]
    _rewrite_consistently(runs, 2)  # seq 3, and every link after it
    ok, out = _verify(tenant, signing)
    assert not ok and f"OK      {tenant.slug}: 4 run(s) verified" in out, out  # the chain alone is consistent again
    assert "first bad seq 3" in out and "the chain was rewritten from seq 3" in out, out


def test_a_rewrite_inside_a_digests_range_is_located_at_the_exact_run(signing):
    """Each digest signs the hash of every run since the digest before it (seq 3-6 here), so the rewritten run
    itself (seq 5) is named, not only the range."""
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    runs = _runs(tenant, 2)
    call_command("write_chain_digests", stdout=io.StringIO())  # signs seq 2
    runs += _runs(tenant, 4)
    call_command("write_chain_digests", stdout=io.StringIO())  # signs seq 6
    runs += _runs(tenant, 1)  # seq 7: after the newest digest
    assert [r.seq for r in runs] == [1, 2, 3, 4, 5, 6, 7] and _verify(tenant, signing)[0]
    _rewrite_consistently(runs, 4)  # seq 5, and every link after it
    ok, out = _verify(tenant, signing)
    assert not ok and f"OK      {tenant.slug}: 7 run(s) verified" in out, out  # the chain alone is consistent again
    broken = [line for line in out.splitlines() if line.startswith("BROKEN")]
    assert len(broken) == 1, out  # the digest of seq 2 still matches; the one of seq 6 does not
    assert "(first bad seq 5)" in broken[0] and "run seq 5 no longer has the hash signed" in broken[0], out


def test_a_version_1_digest_of_the_tip_alone_locates_a_rewrite_between_two_digests(signing):
    """Digests written before run hashes were listed (version 1) sign the tip alone: the rewrite is reported from
    the first run no valid digest covers (seq 3), a lower bound, up to the digest that no longer matches (seq 6)."""
    from agents.digests import _signed_bytes, signing_key

    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    runs = _runs(tenant, 2)
    call_command("write_chain_digests", stdout=io.StringIO())
    runs += _runs(tenant, 4)
    call_command("write_chain_digests", stdout=io.StringIO())
    key = signing_key()
    previous = ""
    for path in sorted((signing / str(tenant.id)).glob("*.json")):  # as version 1 wrote them, chained and signed again
        digest = json.loads(path.read_text())
        for field in ("runs_from", "run_hashes", "signature"):
            digest.pop(field)
        digest["version"], digest["previous_digest"] = 1, previous
        digest["signature"] = base64.b64encode(key.sign(_signed_bytes(digest))).decode()
        path.write_text(json.dumps(digest, indent=1, sort_keys=True))
        previous = hashlib.sha256(path.read_bytes()).hexdigest()
    assert _verify(tenant, signing)[0]
    _rewrite_consistently(runs, 4)
    ok, out = _verify(tenant, signing)
    broken = [line for line in out.splitlines() if line.startswith("BROKEN")]
    assert not ok and len(broken) == 1, out
    assert "(first bad seq 3)" in broken[0] and "rewritten between seq 3 and 6" in broken[0], out


def test_a_digest_signed_with_another_key_is_rejected(signing, settings):
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    _runs(tenant, 1)
    call_command("write_chain_digests", stdout=io.StringIO())
    genuine = sorted((signing / str(tenant.id)).glob("*.json"))[0]
    public_pem = signing / "public_key.pem"
    trusted = public_pem.read_text()
    # An attacker with their own key signs a digest that matches the database after their edits.
    raw = Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                                     serialization.NoEncryption())
    settings.CHAIN_SIGNING_KEY = base64.b64encode(raw).decode()
    call_command("write_chain_digests", stdout=io.StringIO())
    (signing / "trusted.pem").write_text(trusted)
    ok, out = _verify(tenant, signing, public_key=str(signing / "trusted.pem"))
    assert not ok and "signed with another key" in out and genuine.name not in out.split("BROKEN")[1], out
    # An altered genuine digest fails its signature too.
    digest = json.loads(genuine.read_text())
    genuine.write_text(json.dumps({**digest, "seq": digest["seq"] + 5}))
    ok, out = _verify(tenant, signing, public_key=str(signing / "trusted.pem"))
    assert not ok and out.count("signed with another key") == 2, out
