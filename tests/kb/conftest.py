"""Fixtures shared by the kb tests: one tenant and its whole-tenant scope."""

from __future__ import annotations

import pytest

from tests.factories import make_tenant, whole_tenant


@pytest.fixture
def tenant():
    return make_tenant("Acme")


@pytest.fixture
def scope(tenant):
    return whole_tenant(tenant)
