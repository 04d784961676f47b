"""The chat page at `/`: sign-in for a tenant's users, the page in their tenant (or the choice of
tenants), and the API it drives working with the session."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from api.serializers import MessageRequestSerializer
from tests.factories import make_membership


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.DEFAULT_ANSWER_PROVIDER = "offline"


def member(world, name: str, *tenants):
    user = get_user_model().objects.create_user(username=name, password="pw-chat-12345")
    for tenant in tenants or (world.a,):
        make_membership(user, tenant, "reader", all_departments=True)
    return user


def test_sign_in_then_ask_in_a_conversation_with_the_session(world):
    member(world, "employee")
    client = Client()
    assert client.get("/").url == "/login/?next=/"
    page = client.get("/login/")
    assert page.status_code == 200 and 'for="id_username"' in page.content.decode()
    assert client.post("/login/", {"username": "employee", "password": "wrong"}).status_code == 200
    signed_in = client.post("/login/", {"username": "employee", "password": "pw-chat-12345", "next": "/"})
    assert signed_in.status_code == 302 and signed_in.url == "/"
    html = client.get("/").content.decode()
    assert "Ask Acme" in html and 'aria-label="Conversations"' in html and 'name="csrf-token"' in html
    assert 'role="log"' in html and 'for="question"' in html

    cid = client.post("/api/v1/conversations/", {}, content_type="application/json").json()["id"]
    turn = client.post(f"/api/v1/conversations/{cid}/messages/", {"message": "How much may employees spend on hotels per night?"},
                       content_type="application/json").json()
    assert turn["outcome"] == "answered" and turn["citations"][0]["chunk"]["version"] == 1
    assert turn["principal"].startswith("user:")
    feedback = client.post(f"/api/v1/runs/{turn['id']}/feedback/", {"rating": "down", "comment": "too vague"},
                           content_type="application/json")
    assert feedback.status_code == 201
    assert client.post("/logout/").status_code == 302 and client.get("/").status_code == 302


def test_the_corpus_picker_and_starter_questions_hold_only_what_the_user_may_see(world):
    user = get_user_model().objects.create_user(username="seller", password="pw-chat-12345")
    make_membership(user, world.a, "reader", departments=[world.sales])
    client = Client()
    client.login(username="seller", password="pw-chat-12345")
    html = client.get("/").content.decode()
    picker = html.split('id="corpora"')[1].split("</details>")[0]
    assert f'value="{world.shared.id}"' in picker and f'value="{world.sales_corpus.id}"' in picker
    assert f'value="{world.eng_corpus.id}"' not in picker and "eng-only" not in html  # another department's
    assert "globex" not in html.lower()  # another tenant's
    assert 'data-question="What does Travel policy say about employees?"' in html and "Pricing" in html and "Runbook" not in html
    # The mode is said once, in the page: not in each answer.
    assert html.count("Offline mode:") == 1


def test_a_sign_in_without_next_lands_in_the_chat(world):
    member(world, "walk-in")
    signed_in = Client().post("/login/", {"username": "walk-in", "password": "pw-chat-12345"})
    assert signed_in.status_code == 302 and signed_in.url == "/"


def test_the_page_states_the_apis_message_limit_and_does_not_cut_a_paste(world):
    member(world, "paster")
    client = Client()
    client.login(username="paster", password="pw-chat-12345")
    html = client.get("/").content.decode()
    limit = MessageRequestSerializer().fields["message"].max_length
    assert f'data-max-chars="{limit}"' in html and 'aria-describedby="question-limit"' in html
    assert "maxlength=" not in html.split('id="question"')[1].split(">")[0]  # the browser would cut a paste silently
    assert 'id="question-limit" role="status"' in html


def test_a_member_of_two_tenants_chooses_and_a_stranger_is_refused(world):
    member(world, "both", world.a, world.b)
    client = Client()
    client.login(username="both", password="pw-chat-12345")
    choose = client.get("/").content.decode()
    assert world.a.slug in choose and world.b.slug in choose
    assert "Ask Globex" in client.get(f"/?tenant={world.b.slug}").content.decode()
    assert client.get("/?tenant=nope").status_code == 200  # the choice again, naming theirs only
    get_user_model().objects.create_user(username="stranger", password="pw-chat-12345")
    stranger = Client()
    stranger.login(username="stranger", password="pw-chat-12345")
    assert stranger.get("/").status_code == 403


def test_the_original_file_is_downloaded_only_within_the_scope(world):
    from kb.models import Document
    from tenants.scope import Scope, activate

    with activate(Scope.system(world.a.id)):
        travel = Document.objects.for_scope(Scope.system(world.a.id)).get(title="Travel policy")
        runbook = Document.objects.for_scope(Scope.system(world.a.id)).get(title="Runbook")
    r = world.client("a-reader").get(f"/api/v1/documents/{travel.id}/file/")
    assert r.status_code == 200 and b"Employees may book hotels up to 150 EUR per night." in r.content
    assert r["Content-Disposition"] == 'attachment; filename="Travel policy.md"' and r["X-Content-Type-Options"] == "nosniff"
    assert world.client("b-reader").get(f"/api/v1/documents/{travel.id}/file/").status_code == 404
    assert world.client("a-sales-reader").get(f"/api/v1/documents/{runbook.id}/file/").status_code == 404
    assert world.client("a-auditor").get(f"/api/v1/documents/{travel.id}/file/").status_code == 403
