"""Feedback on answers: given by the asker on its own run, append-only, listed for auditors, and found
in the admin's audit review (filter, export, counts per corpus)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection
from django.test import Client

from agents.models import Feedback
from tenants.scope import Scope, activate
from tests.api.conftest import CANARY
from tests.api.test_admin import staff
from tests.factories import make_membership
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

QUESTION = "How much may employees spend on hotels per night?"


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


def ask(world, who: str = "a-reader", question: str = QUESTION) -> int:
    r = world.client(who).post("/api/v1/ask/", {"question": question}, format="json")
    assert r.status_code == 200, r.content
    return r.json()["id"]


def rate(world, who: str, run_id: int, body: dict):
    return world.client(who).post(f"/api/v1/runs/{run_id}/feedback/", body, format="json")


def test_the_asker_rates_its_answer_and_auditors_list_it(world):
    run_id = ask(world)
    r = rate(world, "a-reader", run_id, {"rating": "down", "comment": "The limit is wrong for Paris."})
    assert r.status_code == 201, r.content
    assert (r.json()["run"], r.json()["rating"], r.json()["comment"]) == (run_id, "down", "The limit is wrong for Paris.")
    assert rate(world, "a-reader", run_id, {"rating": "up"}).status_code == 201  # a change of mind is a new row

    listed = world.client("a-auditor").get("/api/v1/feedback/?rating=down").json()["results"]
    assert [(f["run"], f["comment"]) for f in listed] == [(run_id, "The limit is wrong for Paris.")]
    assert len(world.client("a-admin").get("/api/v1/feedback/").json()["results"]) == 2
    assert world.client("b-auditor").get("/api/v1/feedback/").json()["results"] == []
    assert world.client("a-auditor").get("/api/v1/feedback/?rating=meh").status_code == 400
    assert world.client("a-reader").get("/api/v1/feedback/").status_code == 403


def test_only_the_asker_rates_and_bad_input_names_its_field(world):
    run_id = ask(world)
    b_run = ask(world, "b-reader", f"Globex hotel limit {CANARY}?")
    for who in ("a-editor", "a-admin", "b-reader"):
        assert rate(world, who, run_id, {"rating": "up"}).status_code == 404, who
    assert rate(world, "a-reader", b_run, {"rating": "up"}).status_code == 404
    for body, field in (({"rating": "meh"}, "rating"), ({}, "rating"), ({"rating": "up", "comment": "x" * 2001}, "comment")):
        r = rate(world, "a-reader", run_id, body)
        assert r.status_code == 400 and field in r.json()["error"]["fields"], body


@pytest.mark.tenantless_sql("adversarial: tenant-less UPDATE and DELETE of feedback are refused")
def test_feedback_is_append_only(world):
    run_id = ask(world)
    rate(world, "a-reader", run_id, {"rating": "down", "comment": "wrong"})
    scope = Scope.system(world.a.id)
    with pytest.raises(DatabaseError), activate(scope), connection.cursor() as cur:
        cur.execute("UPDATE agents_feedback SET rating = 'up'")
    with pytest.raises(DatabaseError), activate(scope), connection.cursor() as cur:
        cur.execute("DELETE FROM agents_feedback")
    with activate(scope):
        assert Feedback.objects.for_scope(scope).get().rating == "down"


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_the_auditor_finds_feedback_in_audit_review_and_its_exports(client, world):
    run_id = ask(world)
    other = ask(world, question="How often do on-call engineers rotate?")
    rate(world, "a-reader", run_id, {"rating": "down", "comment": "Too vague about Paris"})
    rate(world, "a-reader", other, {"rating": "up"})
    b_run = ask(world, "b-reader", f"Globex hotel limit {CANARY}?")
    rate(world, "b-reader", b_run, {"rating": "down", "comment": f"b says {CANARY}"})
    client.force_login(staff(world, "auditor"))

    page = client.get("/admin/agents/feedback/").content.decode()
    assert "Too vague about Paris" in page and CANARY not in page and "Feedback per corpus" in page and "shared" in page
    down = client.get("/admin/agents/feedback/?rating=down").content.decode()
    assert "Too vague about Paris" in down and f"run {other}<" not in down
    rows = list(csv.reader(io.StringIO(client.get("/admin/agents/feedback/export.csv?rating=down").content.decode())))
    assert rows[0][:4] == ["id", "created_at", "rating", "comment"] and len(rows) == 2
    assert rows[1][2:4] == ["down", "Too vague about Paris"] and rows[1][5] == str(run_id) and "shared" in rows[1][9]
    assert rows[0][4] == "principal" and rows[1][4].startswith("key:") and rows[0][-1] == "principal_name"
    assert rows[1][-1] == "reader key (key)"

    runs = client.get("/admin/agents/run/?feedback=down").content.decode()
    assert QUESTION in runs and "on-call" not in runs
    exported = list(csv.reader(io.StringIO(client.get("/admin/agents/run/export.csv?feedback=down").content.decode())))
    comments = exported[0].index("feedback_comments")
    assert len(exported) == 2 and exported[1][comments] == "down: Too vague about Paris" and CANARY not in str(exported)
    assert client.get("/admin/agents/feedback/add/").status_code == 403


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_exports_and_the_feedback_list_name_the_member_beside_the_raw_principal(client, world):
    """`user:<id>` and `key:<public id>` stay in `principal` (what the chain hashes); `principal_name`, the
    last CSV column (the others keep their positions), names the member or the key."""
    employee = get_user_model().objects.create_user(username="ada", password="pw-ada-123456")
    make_membership(employee, world.a, "reader", all_departments=True)
    session = Client()
    session.login(username="ada", password="pw-ada-123456")
    asked = session.post("/api/v1/ask/", {"question": QUESTION}, content_type="application/json").json()
    assert session.post(f"/api/v1/runs/{asked['id']}/feedback/", {"rating": "up"},
                        content_type="application/json").json()["principal_name"] == "ada (user)"
    rate(world, "a-reader", ask(world), {"rating": "down"})
    client.force_login(staff(world, "auditor"))

    feedback = list(csv.DictReader(io.StringIO(client.get("/admin/agents/feedback/export.csv").content.decode())))
    assert {(f["principal"], f["principal_name"]) for f in feedback} == {
        (f"user:{employee.id}", "ada (user)"), (feedback[1]["principal"], "reader key (key)")}
    header, *runs = list(csv.reader(io.StringIO(client.get("/admin/agents/run/export.csv").content.decode())))
    assert header[:5] == ["id", "tenant_id", "seq", "created_at", "principal"] and header[-2:] == ["feedback_comments", "principal_name"]
    assert [(r[4], r[-1]) for r in runs] == [(f"user:{employee.id}", "ada (user)"), (feedback[1]["principal"], "reader key (key)")]
    jsonl = [json.loads(line) for line in client.get("/admin/agents/run/export.jsonl").content.decode().splitlines()]
    assert [r["principal_name"] for r in jsonl] == ["ada (user)", "reader key (key)"]
    listed = world.client("a-auditor").get("/api/v1/feedback/").json()["results"]
    assert sorted(f["principal_name"] for f in listed) == ["ada (user)", "reader key (key)"]
