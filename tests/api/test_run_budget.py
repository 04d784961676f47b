"""The tenant's daily run budget is a domain rule (agents.budgets) spent by agents.services.ask itself:
enforced for a caller with no HTTP in front (ask, a conversation turn), the MCP tool and the REST API
alike, on one counter; a refused run stores nothing; an invalid question is not counted."""

from __future__ import annotations

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from agents import conversations
from agents.budgets import BudgetExceeded
from agents.models import Run
from agents.services import InvalidQuestion, ask
from api import mcp_server
from tenants.scope import activate
from tests.factories import whole_tenant

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

QUESTION = "What is the hotel limit per night?"


def _limit(tenant, runs: int) -> None:
    tenant.settings = {"daily_runs": runs}
    with activate(whole_tenant(tenant)):  # only the tenant itself may change its row (RLS)
        tenant.save()


def _runs(tenant) -> int:
    scope = whole_tenant(tenant)
    with activate(scope):
        return Run.objects.for_scope(scope).count()


def test_ask_called_directly_spends_the_daily_budget(world):
    _limit(world.a, 2)
    scope = whole_tenant(world.a)
    with pytest.raises(InvalidQuestion):
        ask(scope=scope, question="   ", provider="offline")  # refused as invalid: not counted
    ask(scope=scope, question=QUESTION, provider="offline")
    ask(scope=scope, question=QUESTION, provider="offline")
    with pytest.raises(BudgetExceeded) as refused:
        ask(scope=scope, question=QUESTION, provider="offline")
    assert 1 <= refused.value.retry_after <= 86400
    assert str(refused.value) == "the tenant's daily agent-run budget is used up"
    assert _runs(world.a) == 2  # the refused run stored nothing
    # Another tenant's budget is its own.
    ask(scope=whole_tenant(world.b), question=QUESTION, provider="offline")


def test_a_conversation_turn_spends_the_same_budget(world):
    _limit(world.a, 1)
    scope = whole_tenant(world.a)
    conversation = conversations.start_conversation(scope=scope)
    conversations.send_message(scope=scope, conversation_id=conversation.pk, message=QUESTION, provider="offline")
    with pytest.raises(BudgetExceeded):
        conversations.send_message(scope=scope, conversation_id=conversation.pk, message="And per day?", provider="offline")
    with pytest.raises(BudgetExceeded):
        ask(scope=scope, question=QUESTION, provider="offline")
    assert _runs(world.a) == 1


def test_the_mcp_ask_tool_spends_the_same_budget_and_says_when_to_retry(world):
    _limit(world.a, 1)
    scope = mcp_server.key_scope(world.keys["a-reader"])
    assert mcp_server.ask_for(scope, QUESTION, "auto")["run_id"]
    with pytest.raises(ToolError, match=r"the tenant's daily agent-run budget is used up; retry in \d+ s"):
        mcp_server.ask_for(scope, QUESTION, "auto")
    # The REST ask shares the counter: 429 with the same message as before the budget moved below the edge.
    r = world.client("a-reader").post("/api/v1/ask/", {"question": QUESTION}, format="json")
    assert r.status_code == 429 and 1 <= int(r["Retry-After"]) <= 86400
    body = r.json()["error"]
    assert body["code"] == "throttled" and body["fields"] == {}
    assert body["message"].startswith("the tenant's daily agent-run budget is used up Expected available in ")


def test_the_rest_conversation_turn_is_429_before_its_stream_starts(world):
    _limit(world.a, 1)
    c = world.client("a-reader")
    conversation_id = c.post("/api/v1/conversations/", {}, format="json").json()["id"]
    assert c.post(f"/api/v1/conversations/{conversation_id}/messages/", {"message": QUESTION}, format="json").status_code == 200
    refused = c.post(f"/api/v1/conversations/{conversation_id}/messages/", {"message": QUESTION}, format="json")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "throttled"
    stream = c.post(f"/api/v1/conversations/{conversation_id}/messages/stream/", {"message": QUESTION}, format="json")
    assert stream.status_code == 429 and int(stream["Retry-After"]) >= 1
