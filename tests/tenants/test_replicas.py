"""Read replicas without one: no "replica" alias, every read on "default", the router silent; and the
DATABASE_REPLICA_URL setting. (On a real standby: tests/api/test_replica_reads.py and the re-run suites.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connections

from kb.models import Corpus
from tenants import replicas
from tests.factories import make_corpus, make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

ROOT = Path(__file__).resolve().parents[2]


def settings_databases(**env: str) -> subprocess.CompletedProcess:
    """DATABASES and DATABASE_ROUTERS of a fresh process with `env` (JSON on stdout)."""
    code = ("import django, json; django.setup(); from django.conf import settings; "
            "print(json.dumps({'databases': settings.DATABASES, 'routers': settings.DATABASE_ROUTERS}, default=str))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "api.project.settings", **env})


def test_without_a_replica_url_there_is_no_replica_alias():
    out = settings_databases(DATABASE_REPLICA_URL="")
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout.splitlines()[-1])
    assert set(config["databases"]) == {"owner", "default"}
    assert config["routers"] == ["tenants.replicas.ReplicaRouter"]


def test_a_replica_url_adds_the_alias_as_the_application_role():
    out = settings_databases(DATABASE_REPLICA_URL="postgres://standby.example.com:5433/grounded?sslmode=require",
                             DATABASE_APP_USER="app_role", DATABASE_APP_PASSWORD="app-pw")
    assert out.returncode == 0, out.stderr
    replica = json.loads(out.stdout.splitlines()[-1])["databases"]["replica"]
    assert (replica["HOST"], replica["PORT"], replica["NAME"]) == ("standby.example.com", "5433", "grounded")
    assert (replica["USER"], replica["PASSWORD"], replica["OPTIONS"]) == ("app_role", "app-pw", {"sslmode": "require"})
    assert replica["ENGINE"] == "tenants.db_backend" and replica["TEST"]["MIRROR"] == "default"


def test_a_malformed_replica_url_stops_start_up_naming_it():
    out = settings_databases(DATABASE_REPLICA_URL="mysql://nope")
    assert out.returncode != 0 and "DATABASE_REPLICA_URL is malformed" in out.stderr


@pytest.mark.django_db(databases=["default", "owner"], transaction=True)
def test_without_a_replica_every_read_stays_on_the_primary():
    assert "replica" not in connections.settings and not replicas.configured()
    tenant = make_tenant("Acme")
    make_corpus(tenant, "Policies")
    scope = whole_tenant(tenant)
    assert replicas.read_alias(scope) == "default"
    replicas.note_write(scope)  # nothing to pin: no query, no cache entry
    with replicas.reading(scope) as alias:
        assert alias == "default" and replicas.current_read_alias() == "default"
        corpus = Corpus.objects.for_scope(scope).get()
    assert corpus._state.db == "default" and replicas.current_read_alias() == "default"
    router = replicas.ReplicaRouter()
    assert router.db_for_read(Corpus) is None and router.db_for_write(Corpus, instance=corpus) is None
