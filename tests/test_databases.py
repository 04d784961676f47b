"""The per-worker test databases and Redis databases of tests/databases.py."""

from __future__ import annotations

import pytest
from django.db import connections

from tests import databases


def test_each_xdist_worker_has_its_own_redis_database():
    url = "redis://127.0.0.1:6379/2"
    assert databases.redis_url_for_worker(url, "") == url
    assert databases.redis_url_for_worker(url, "gw0") == "redis://127.0.0.1:6379/8"
    assert databases.redis_url_for_worker("redis://:pw@host:6380/4", "gw3") == "redis://:pw@host:6380/11"
    with pytest.raises(RuntimeError, match="gw8 has no Redis database"):
        databases.redis_url_for_worker(url, "gw8")


def test_worker_database_names():
    assert databases.worker_database_name("test_grounded", "") == "test_grounded"
    assert databases.worker_database_name("test_grounded", "gw2") == "test_grounded_gw2"


def test_the_template_name_follows_the_schema_digest():
    digest = databases.schema_digest()
    assert len(digest) == 12 and digest == databases.schema_digest()
    assert databases.template_name("test_x") == f"test_x_tpl_{digest}"


@pytest.mark.django_db(databases=["default", "owner"])
def test_this_worker_runs_on_its_own_copy_of_the_current_template():
    base = connections["owner"].settings_dict["TEST"]["NAME"]
    expected = databases.worker_database_name(base, databases.xdist_worker())
    with connections["default"].cursor() as cur:
        cur.execute("SELECT current_database(), current_user")
        assert cur.fetchone() == (expected, connections["default"].settings_dict["USER"])
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", [databases.template_name(base)])
        assert cur.fetchone() == (1,)
