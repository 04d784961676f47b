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
