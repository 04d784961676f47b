"""Answers that know when they do not know, asked through the API on the demo corpus with the
packaged cross-encoder (kb.relevance): off-topic questions are declined, figures are quoted whole,
a follow-up resolves to the thing asked about, a yes or no agrees with its quote, and a French
question over a French document is answered with the rule."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from agents.demo import seed_demo
from kb.ingest import run_ingest_job, upload_document
from kb.models import Corpus
from tenants.models import ApiKey
from tenants.scope import Scope, activate

pytestmark = pytest.mark.django_db(databases=["default", "owner"])


@pytest.fixture
def demo(monkeypatch, django_capture_on_commit_callbacks):
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", "packaged")
    with django_capture_on_commit_callbacks(execute=True):
        tenant = seed_demo(log=lambda _line: None)
    _, raw = ApiKey.issue(tenant=tenant, name="reader", role="reader", all_departments=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return tenant, client


def add_document(tenant, title: str, text: str) -> None:
    scope = Scope.system(tenant.id, principal="test")
    with activate(scope):
        corpus = Corpus.objects.for_scope(scope).filter(department__isnull=True).first()
    _, job = upload_document(scope=scope, corpus=corpus, filename=f"{title}.md", data=f"# {title}\n\n{text}\n".encode(), title=title)
    run_ingest_job(job_id=job.id, tenant_id=tenant.id)


def ask(client: APIClient, question: str) -> dict:
    r = client.post("/api/v1/ask/", {"question": question, "strategy": "auto"}, format="json")
    assert r.status_code == 200, r.content
    return r.json()


@pytest.mark.parametrize("question", [
    "What is the company's policy on bringing dogs to the office?",
    "Who is the CEO of Kestrel Analytics?",  # no sentence names a CEO (agents.anchors, agents.sufficiency)
    "Where can I park in Berlin?",
    "What is the capital of Australia?",
    # Every part's closest passages name the company, as every policy does: its own name is no answer (agents.consensus).
    "Which team owns the VPN, and which tool do we use for password resets?"])
def test_questions_the_documents_do_not_answer_are_declined(demo, question):
    _, client = demo
    body = ask(client, question)
    assert body["outcome"] == "not_enough_evidence", body["answer"]


def test_a_figure_is_quoted_whole(demo):
    tenant, client = demo
    add_document(tenant, "Canteen", "The canteen opens at 11.30 on weekdays. Lunch costs EUR 4.50 per day for employees.")
    body = ask(client, "How much does lunch cost in the canteen?")
    assert body["outcome"] == "answered", body["answer"]
    assert "EUR 4.50" in body["answer"] and not re.search(r"EUR 4\.\"", body["answer"])


def test_a_yes_or_no_agrees_with_its_quote(demo):
    tenant, client = demo
    add_document(tenant, "Office pets", "Dogs are welcome in the office on Fridays, on a leash. Cats stay at home.")
    body = ask(client, "Can I bring my dog to the office?")
    assert body["outcome"] == "answered", body["answer"]
    assert "Dogs are welcome in the office on Fridays" in body["answer"]
    assert not body["answer"].lstrip().lower().startswith("no")


def test_a_french_question_is_answered_with_the_rule(demo):
    _, client = demo
    body = ask(client, "Combien de jours par semaine peut-on télétravailler ?")
    assert body["outcome"] == "answered", body["answer"]
    assert "trois jours par semaine" in body["answer"]
    assert "Responsable" not in body["answer"]


def test_a_thing_described_by_facts_in_several_documents_is_the_name_they_share(demo):
    tenant, client = demo
    add_document(tenant, "Lab history", "Orla Vance set up the Lyon test bench in 2021, with two borrowed oscilloscopes.")
    add_document(tenant, "Runbooks", "The outage playbook for the billing service was drafted by Orla Vance after the 2023 incident.")
    add_document(tenant, "Review board", "Chairing the quarterly security review is Orla Vance, elected by the engineers.")
    body = ask(client, "Who is the engineer that built the Lyon test lab, wrote the billing outage runbook, "
                       "and leads the security review board?")
    assert body["outcome"] == "answered", body["answer"]
    assert body["answer"].startswith("Orla Vance: the passages closest to every part"), body["answer"]
    # The count the answer rests on is in the trace: the share of the caller's documents naming the name.
    (answer_step,) = [s for s in body["steps"] if s["name"] == "answer"]
    shares = answer_step["arguments"]["document_share"]
    assert 0 < shares["Orla Vance"] <= 0.5, shares
