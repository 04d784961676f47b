"""Concurrent runs of one tenant still form one unbroken chain (appends serialise on an advisory lock)."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

import tests.kb._transactional  # noqa: F401 - flush through the owner after transactional tests
from agents.chain import verify_tenant_chain
from agents.services import ask
from tests.agents.conftest import make_policy_corpus
from tests.factories import make_tenant, whole_tenant


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_concurrent_runs_chain_without_gaps_or_forks():
    tenant = make_tenant("Acme")
    make_policy_corpus(tenant)
    scope = whole_tenant(tenant)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(3):
                ask(scope=scope, question=f"How much is a hotel night reimbursed? ({i}.{j})", strategy="classic", provider="offline")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    report = verify_tenant_chain(tenant.id)
    assert report.ok and report.runs_checked == 12
