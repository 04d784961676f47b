"""Audit review (issue 29): `q=` searches question and answer in the API's runs list and the admin's
changelist; keys and users are shown by name next to the principal."""

from __future__ import annotations

import pytest

from agents.services import ask
from tests.api.conftest import CANARY
from tests.api.test_admin import staff
from tests.factories import make_membership, make_staff_user
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)


def _ask(world, who: str, question: str) -> dict:
    response = world.client(who).post("/api/v1/ask/", {"question": question}, format="json")
    assert response.status_code == 200, response.content[:300]
    return response.json()


def _ids(response) -> set[int]:
    assert response.status_code == 200, response.content[:300]
    return {run["id"] for run in response.json()["results"]}


@pytest.mark.django_db
def test_runs_q_searches_question_and_answer_full_text_and_substring(world):
    hotel = _ask(world, "a-reader", "What is the hotel limit per night?")
    discount = _ask(world, "a-reader", "What is the sales discount ceiling?")
    _ask(world, "b-reader", f"hotel limit {CANARY}?")
    auditor = world.client("a-auditor")
    assert _ids(auditor.get("/api/v1/runs/", {"q": "hotels"})) == {hotel["id"]}  # stemmed: hotels ~ hotel
    assert _ids(auditor.get("/api/v1/runs/", {"q": "discount -hotel"})) == {discount["id"]}  # web-search syntax
    assert _ids(auditor.get("/api/v1/runs/", {"q": "ceiling?"})) == {discount["id"]}  # plain substring
    # The answer, not only the question, is searched. The offline answer quotes the policy ("Employees may book hotels
    # up to 150 EUR per night."): "150" is in the hotel run's answer only, and "employee booking" matches it only stemmed.
    assert "150" in hotel["answer"] and "150" not in hotel["question"] and "150" not in discount["answer"], hotel["answer"]
    assert _ids(auditor.get("/api/v1/runs/", {"q": "150"})) == {hotel["id"]}
    assert "Employees may book" in hotel["answer"] and "booking" not in hotel["answer"], hotel["answer"]
    assert _ids(auditor.get("/api/v1/runs/", {"q": "employee booking"})) == {hotel["id"]}  # full text over the answer
    assert _ids(auditor.get("/api/v1/runs/", {"q": CANARY})) == set()  # another tenant's runs stay out
    assert _ids(auditor.get("/api/v1/runs/", {"q": "hotel", "outcome": hotel["outcome"]})) == {hotel["id"]}
    assert _ids(auditor.get("/api/v1/runs/", {"q": "   "})) == {hotel["id"], discount["id"]}


@pytest.mark.django_db
def test_runs_show_the_keys_and_users_name_next_to_the_principal(world):
    by_key = _ask(world, "a-reader", "What is the hotel limit per night?")
    assert by_key["principal"].startswith("key:") and by_key["principal_name"] == "reader key (key)"
    member = world.client("a-admin").post("/api/v1/members/", {"username": "alice", "role": "reader", "all_departments": True},
                                          format="json")
    assert member.status_code == 201, member.content
    from tenants.models import Membership
    from tenants.scope import Scope, activate

    with activate(Scope.system(world.a.id)):
        scope = Membership.objects.get(pk=member.json()["id"]).scope()
    by_user = ask(scope=scope, question="What is the hotel limit per night?", strategy="classic")
    auditor = world.client("a-auditor")
    listed = {run["id"]: run for run in auditor.get("/api/v1/runs/").json()["results"]}
    assert listed[by_key["id"]]["principal_name"] == "reader key (key)"
    assert listed[by_user.id]["principal"] == by_user.principal and listed[by_user.id]["principal_name"] == "alice (user)"
    detail = auditor.get(f"/api/v1/runs/{by_user.id}/").json()
    assert detail["principal_name"] == "alice (user)" and detail["principal"] == f"user:{scope.principal.split(':')[1]}"


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_admin_review_searches_text_and_names_principals(client, world):
    hotel = _ask(world, "a-reader", "What is the hotel limit per night?")
    discount = _ask(world, "a-editor", "What is the sales discount ceiling?")
    client.force_login(staff(world, "auditor"))
    listing = client.get("/admin/agents/run/", {"q": "hotels"}).content.decode()
    assert "hotel limit per night" in listing and "discount ceiling" not in listing
    assert "reader key (key)" in listing and hotel["principal"] in listing
    listing = client.get("/admin/agents/run/", {"q": "ceiling?"}).content.decode()
    assert "discount ceiling" in listing and "editor key (key)" in listing and "hotel limit per night" not in listing
    assert client.get("/admin/agents/run/", {"q": "\x00"}).status_code == 400  # NUL is refused at the edge (api/nul_bytes.py)
    assert client.get("/admin/agents/run/", {"principal": "\x00"}).status_code == 400
    by_principal = client.get("/admin/agents/run/", {"principal": hotel["principal"]}).content.decode()
    assert "hotel limit per night" in by_principal and "discount ceiling" not in by_principal
    detail = client.get(f"/admin/agents/run/{discount['id']}/change/").content.decode()
    assert "editor key (key)" in detail and discount["principal"] in detail


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_admin_playground_runs_name_both_principals(client, world):
    admin_user = staff(world, "admin")
    client.force_login(admin_user)
    member_user = make_staff_user("bob-acme", "x" * 12)
    membership = make_membership(member_user, world.a, "reader", all_departments=True)
    response = client.post("/admin/agents/run/ask/", {"act_as": f"member:{membership.pk}", "strategy": "classic",
                                                      "question": "What is the hotel limit per night?"})
    assert response.status_code == 200
    listing = client.get("/admin/agents/run/").content.decode()
    assert f"user:{member_user.pk} via admin:user:{admin_user.pk}" in listing
    assert f"bob-acme (user) via admin:{admin_user.username} (user)" in listing, listing[listing.find("field-asked_by"):][:300]
