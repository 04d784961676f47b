"""The OpenAPI schema types the run trace's JSON columns as what the API returns (objects and lists, not
strings or 'anything'), and validates (issue 32)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


def test_run_and_step_json_columns_are_typed_as_returned(world):
    schema = world.client(None).get("/api/v1/schema/?format=json").json()["components"]["schemas"]
    run, step = schema["Run"]["properties"], schema["RunStep"]["properties"]
    assert run["scope"]["type"] == "object" and run["scope"]["properties"]["department_ids"]["type"] == "array"
    assert run["budgets"]["type"] == "object" and run["missing"] == {**run["missing"], "type": "array", "items": {"type": "string"}}
    assert step["arguments"]["type"] == "object" and step["effective_filter"]["type"] == "object"
    assert step["chunk_ids"]["items"] == {"type": "integer"} and step["content_hashes"]["items"] == {"type": "string"}
    asked = world.client("a-reader").post("/api/v1/ask/", {"question": "What is the hotel limit?", "strategy": "classic"},
                                          format="json").json()
    detail = world.client("a-auditor").get(f"/api/v1/runs/{asked['id']}/").json()
    assert isinstance(detail["scope"], dict) and isinstance(detail["budgets"], dict) and isinstance(detail["missing"], list)
    assert all(isinstance(s["arguments"], dict) and isinstance(s["chunk_ids"], list) for s in detail["steps"])


def test_the_schema_validates(tmp_path):
    call_command("spectacular", file=str(tmp_path / "schema.yaml"), validate=True, fail_on_warn=False)


def _schema_from_the_command(tmp_path) -> dict:
    import yaml

    call_command("spectacular", file=str(tmp_path / "schema.yaml"), validate=True, fail_on_warn=False)
    return yaml.safe_load((tmp_path / "schema.yaml").read_text())


def test_the_schema_introduces_authentication_keys_and_roles(world, tmp_path):
    from tenants.models import Role

    served = world.client(None).get("/api/v1/schema/?format=json").json()
    for schema in (served, _schema_from_the_command(tmp_path)):
        intro = schema["info"]["description"]
        for needed in ("Authorization: Bearer gk_", "X-API-Key: gk_", "X-Tenant", "X-CSRFToken", "POST /api/v1/keys/",
                       "create_tenant_admin", "scripts/run", "shown once", "403 permission_denied", "401"):
            assert needed in intro, needed
        for role in Role.values:
            assert f"| {role} |" in intro, role
        schemes = schema["components"]["securitySchemes"]
        assert schemes["ApiKey"] == {**schemes["ApiKey"], "type": "http", "scheme": "bearer", "bearerFormat": "gk_<id>_<secret>"}
        assert schemes["ApiKeyHeader"] == {**schemes["ApiKeyHeader"], "type": "apiKey", "in": "header", "name": "X-API-Key"}
        assert schemes["cookieAuth"]["in"] == "cookie"
        # Either header alone authenticates: alternatives, not one requirement naming both.
        search = schema["paths"]["/api/v1/search/"]["post"]["security"]
        assert {"ApiKey": []} in search and {"ApiKeyHeader": []} in search and {"cookieAuth": []} in search
        assert not any(len(requirement) > 1 for requirement in search)


def test_the_x_api_key_scheme_the_schema_declares_authenticates(world):
    from rest_framework.test import APIClient

    raw = world.keys["a-reader"]
    assert APIClient().get("/api/v1/corpora/", HTTP_X_API_KEY=raw).status_code == 200
    assert APIClient().get("/api/v1/corpora/", HTTP_X_API_KEY=raw + "x").status_code == 401
