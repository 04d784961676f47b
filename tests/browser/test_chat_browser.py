"""The chat page in a real browser against a live server: an employee signs in, asks, follows up with a
pronoun, opens a citation and sees the quoted words highlighted, gives a thumbs down with a comment;
the auditor then finds that feedback in audit review and in its export. Screenshots of the chat at
1400 px and at phone width go to test-artifacts/ (git-ignored)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from tests.api.conftest import World, ingest, world  # noqa: F401  (fixture)
from tests.browser.test_admin_browser import page, pytestmark, shot  # noqa: F401  (fixture, marks)
from tests.factories import make_membership, make_staff_user


def test_employee_asks_follows_up_opens_a_source_and_gives_feedback(live_server, world: World, page):  # noqa: F811
    ingest(world.shared, "Expense Policy", "Meals on business trips are reimbursed up to 40 EUR per day. "
                                           "Taxi rides after 22:00 are reimbursed up to 60 EUR.")
    employee = get_user_model().objects.create_user(username="erin", password="chat-horse-9")
    make_membership(employee, world.a, "reader", all_departments=True)

    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "erin")
    page.fill("#id_password", "chat-horse-9")
    page.click("button[type=submit]")
    page.wait_for_selector("#question")

    page.fill("#question", "What does the Expense Policy say about meals?")
    page.keyboard.press("Enter")
    page.wait_for_selector(".turn .a")
    assert "40 EUR" in page.inner_text(".turn:nth-child(1) .a")

    page.fill("#question", "What does it say about taxi rides?")
    page.click("#send")
    page.wait_for_selector(".turn:nth-child(2) .a")
    second = page.locator(".turn").nth(1)
    assert "Understood as: What does Expense Policy say about taxi rides?" in second.inner_text()
    assert "60 EUR" in second.locator(".a").inner_text()
    assert page.locator("#threads li").count() == 1

    second.locator(".cite").first.click()
    page.wait_for_selector("#source:not([hidden])")
    assert page.inner_text("#source-title") == "Expense Policy" and "version 1" in page.inner_text("#source-meta")
    assert "60 EUR" in page.inner_text("#source mark")
    shot(page, "chat-1400")
    with page.expect_download() as download:
        page.click("#download")
    assert download.value.suggested_filename == "Expense Policy.md"
    page.keyboard.press("Escape")

    second.locator(".feedback input").fill("Does not say who approves late taxis")
    second.locator("button[data-rating=down]").click()
    page.wait_for_selector("text=Thanks, feedback saved.")
    page.fill("#question", "How many parking spaces does the office have for visitors?")
    page.click("#send")
    page.wait_for_selector(".turn:nth-child(3) .a")
    assert "Not enough evidence" in page.inner_text(".turn:nth-child(3) .a.not-enough")
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "chat-phone")

    auditor = make_staff_user("audrey", "audit-horse-9")
    make_membership(auditor, world.a, "auditor", all_departments=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.click("header.top button[type=submit]")  # sign out
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "audrey")
    page.fill("#id_password", "audit-horse-9")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    page.goto(f"{live_server.url}/admin/agents/feedback/?rating=down")
    assert "Does not say who approves late taxis" in page.inner_text("#result_list")
    assert "shared" in page.inner_text("#feedback-per-corpus + table")
    shot(page, "chat-feedback-review")
    exported = page.request.get(f"{live_server.url}/admin/agents/feedback/export.csv?rating=down").text()
    assert "Does not say who approves late taxis" in exported and "taxi rides" in exported
