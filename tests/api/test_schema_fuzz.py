"""Schemathesis against the OpenAPI schema with two tenants' keys: no 500s, and no response to tenant A
ever contains tenant B's canary strings, whatever the generated input (B's real ids included)."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from agents.models import Run
from api.views import agents as agent_views
from kb.models import Document, IngestJob, Source
from tenants.models import ApiKey
from tenants.scope import activate
from tests.api.conftest import CANARY
from tests.factories import make_membership, whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", get_wsgi_application())


@pytest.fixture
def foreign(world, monkeypatch, settings):
    """Tenant B's ids per path parameter (a source of B's included), and one of B's runs so the runs endpoints have
    something to hide."""
    settings.RATE_LIMIT_PER_MINUTE = 100_000
    monkeypatch.setattr(agent_views, "start_background", lambda target: target())
    world.client("b-reader").post("/api/v1/ask/", {"question": f"What is the Globex hotel limit {CANARY}?"}, format="json")
    conversation = world.client("b-reader").post("/api/v1/conversations/", {"title": CANARY}, format="json").json()
    b = whole_tenant(world.b)
    with activate(b):
        doc = Document.objects.for_scope(b).first()
        job = IngestJob.objects.for_scope(b).first()
        run = Run.objects.for_scope(b).first()
        key = ApiKey.objects.filter(tenant=world.b).first()
        source = Source.objects.create(tenant_id=world.b.id, corpus=world.b_corpus, name=f"globex source {CANARY}", kind="folder",
                                       config={"path": f"/srv/{CANARY}"}, schedule_minutes=0)
    from django.contrib.auth import get_user_model

    member = make_membership(get_user_model().objects.create(username=f"user-{CANARY}"), world.b, "admin")
    return {"corpus_id": world.b_corpus.id, "document_id": doc.id, "job_id": job.id, "run_id": run.id,
            "key_id": key.id, "member_id": member.id, "source_id": source.id, "conversation_id": conversation["id"]}


@pytest.fixture
def keep_connection(foreign):
    """The real WSGI handler closes "old" connections per request; that would end the test's transaction
    (Django's own test client disconnects the same receivers, and reconnects them after each of its requests,
    so this runs after the fixtures that use it)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def no_canary(response) -> None:
    assert CANARY not in response.text, f"tenant B data leaked to tenant A: {response.request.method} {response.request.url}"


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_api_fuzz(case, world, foreign, keep_connection):
    # Both declared key schemes carry the admin key: left to Schemathesis, X-API-Key (read first) would be
    # random text, and its failures would lock this address out.
    headers = {"Authorization": f"Bearer {world.keys['a-admin']}", "X-API-Key": world.keys["a-admin"]}
    response = case.call(headers=headers)
    case.validate_response(response, checks=[not_a_server_error])
    no_canary(response)
    if case.path_parameters:
        # The same request aimed at tenant B's real objects must look exactly like a missing id.
        case.path_parameters = {k: foreign.get(k, v) for k, v in case.path_parameters.items()}
        response = case.call(headers=headers)
        case.validate_response(response, checks=[not_a_server_error])
        no_canary(response)
        # OPTIONS describes the endpoint, never the object: the same answer for any id.
        assert case.method == "OPTIONS" or response.status_code in {400, 404, 405}, (
            case.method, case.formatted_path, response.status_code, response.text[:300])
