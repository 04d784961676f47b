"""The chat page in a real browser against a live server: an employee signs in, asks, follows up with a
pronoun, opens a citation and sees the quoted words highlighted, gives a thumbs down with a comment;
the auditor then finds that feedback in audit review and in its export. At 1400 px and at phone width
(390 px) the page does not scroll sideways, the question box and its button are on screen and work, and
the source panel opens inside the screen. Screenshots go to test-artifacts/ (git-ignored)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.api.conftest import World, ingest, world  # noqa: F401  (fixture)
from tests.browser.test_admin_browser import page, pytestmark, shot  # noqa: F401  (fixture, marks)
from tests.factories import make_membership, make_staff_user

PHONE = {"width": 390, "height": 844}


def overflow(tab) -> dict:
    """How far the page itself scrolls beyond the window, in px (0 or less: it does not)."""
    return tab.evaluate("(({scrollWidth, clientWidth, scrollHeight, clientHeight}) => "
                        "({x: scrollWidth - clientWidth, y: scrollHeight - clientHeight}))(document.scrollingElement)")


def on_screen(tab, locator) -> bool:
    """The element is shown and lies wholly inside the window as it is scrolled now."""
    box, view = locator.bounding_box(), tab.viewport_size
    return (locator.is_visible() and box is not None and box["x"] >= 0 and box["y"] >= 0
            and box["x"] + box["width"] <= view["width"] and box["y"] + box["height"] <= view["height"])


def axe_violations(tab) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now (rule id and the first offending element)."""
    axe = pytest.importorskip("axe_playwright_python.sync_playwright").Axe()
    found = axe.run(tab).response["violations"]
    return [f"{v['id']}: {v['nodes'][0]['html'][:120]}" for v in found if v.get("impact") in ("serious", "critical")]


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
    # every progress line the page shows, to check that steps are named in words
    page.evaluate("""() => { window.progressSeen = [];
        new MutationObserver((records) => { for (const r of records) for (const n of r.addedNodes) {
            const p = n.nodeType === 3 ? n.parentElement : n;
            if (p && p.classList.contains('progress')) window.progressSeen.push(n.textContent); } })
          .observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true}); }""")

    # Text over the API's limit is kept in the box and refused with a message, not cut.
    too_long = "word " * 801  # 4,004 characters, trimmed
    page.fill("#question", too_long)
    page.keyboard.press("Enter")
    assert "too long to send" in page.inner_text("#question-limit") and "(not sent)" in page.inner_text("#question-limit")
    assert page.input_value("#question") == too_long and page.locator(".turn").count() == 0
    assert page.get_attribute("#question", "aria-invalid") == "true"
    shot(page, "chat-too-long")
    page.fill("#question", "x" * 3700)
    assert page.inner_text("#question-limit") == "3,700 / 4,000 characters"
    page.fill("#question", "")
    assert page.inner_text("#question-limit") == "" and page.get_attribute("#question", "aria-invalid") == "false"

    page.fill("#question", "What does the Expense Policy say about meals?")
    page.keyboard.press("Enter")
    page.wait_for_selector(".turn .a")
    assert "40 EUR" in page.inner_text(".turn:nth-child(1) .a")

    page.fill("#question", "What does it say about taxi rides?")
    page.click("#send")
    page.wait_for_selector(".turn:nth-child(2) .a")
    page.wait_for_selector("#send:not([disabled])")  # the page is done with that answer (threads reloaded)
    second = page.locator(".turn").nth(1)
    assert "Understood as: What does Expense Policy say about taxi rides?" in second.inner_text()
    assert "60 EUR" in second.locator(".a").inner_text()
    assert page.locator("#threads li").count() == 1
    seen = set(page.evaluate("window.progressSeen"))
    labels = {"Starting…", "Understanding the follow-up…", "Searching the documents…", "Checking the evidence…",
              "Writing the answer…", "Working…"}
    assert seen and seen <= labels and "Understanding the follow-up…" in seen, seen  # never a raw step name

    second.locator(".cite").first.click()
    page.wait_for_selector("#source:not([hidden])")
    assert page.inner_text("#source-title") == "Expense Policy" and "version 1" in page.inner_text("#source-meta")
    assert "60 EUR" in page.inner_text("#source mark")
    assert overflow(page) == {"x": 0, "y": 0}  # the window holds the page; only the conversation and the panel scroll
    assert all(on_screen(page, page.locator(s)) for s in ("#question", "#send", "#source-title", "#source mark", "#close-source"))
    shot(page, "chat-1400")
    with page.expect_download() as download:
        page.click("#download")
    assert download.value.suggested_filename == "Expense Policy.md"
    page.keyboard.press("Escape")

    second.locator(".feedback input").fill("Does not say who approves late taxis")
    second.locator("button[data-rating=down]").click()
    page.wait_for_selector("text=Thanks, feedback saved.")
    down, up = second.locator("button[data-rating=down]"), second.locator("button[data-rating=up]")
    assert down.get_attribute("aria-pressed") == "true" and up.get_attribute("aria-pressed") == "false"
    background = "e => getComputedStyle(e).backgroundColor"
    assert down.evaluate(background) != up.evaluate(background)  # the chosen one looks chosen

    # At phone width: nothing scrolls sideways, the question box and its button are on screen side by side and
    # large enough to use, and asking works with them.
    page.set_viewport_size(PHONE)
    assert overflow(page)["x"] <= 0
    question, send = page.locator("#question"), page.locator("#send")
    question.scroll_into_view_if_needed()
    assert on_screen(page, question) and on_screen(page, send) and question.is_editable() and send.is_enabled()
    box, button = question.bounding_box(), send.bounding_box()
    assert box["width"] >= 200 and box["x"] + box["width"] <= button["x"], (box, button)  # room to type, no overlap
    assert button["width"] >= 44 and button["height"] >= 44, button  # a thumb-sized target
    question.fill("How many parking spaces does the office have for visitors?")
    send.click()
    page.wait_for_selector(".turn:nth-child(3) .a")
    page.wait_for_selector("#send:not([disabled])")  # the page is done with that answer (threads reloaded)
    assert "Not enough evidence" in page.inner_text(".turn:nth-child(3) .a.not-enough")
    assert overflow(page)["x"] <= 0  # long answers and the feedback bars wrap instead of widening the page
    shot(page, "chat-phone")

    # The source panel at phone width: inside the screen, its title, quote and close button readable.
    second.locator(".cite").first.click()
    page.wait_for_selector("#source:not([hidden])")
    panel = page.locator("#source")
    assert on_screen(page, panel) and panel.bounding_box()["width"] == PHONE["width"]
    assert all(on_screen(page, page.locator(s)) for s in ("#source-title", "#source mark", "#close-source"))
    assert "60 EUR" in page.inner_text("#source mark") and page.inner_text("#source-title") == "Expense Policy"
    assert page.eval_on_selector("#source-text", "e => parseFloat(getComputedStyle(e).fontSize)") >= 14
    assert overflow(page)["x"] <= 0
    shot(page, "chat-phone-source", full_page=False)  # what the phone's screen shows
    page.keyboard.press("Escape")
    assert panel.is_hidden()

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


def test_an_answer_streams_in_and_conversations_are_renamed_searched_and_deleted(live_server, world: World, page):  # noqa: F811
    """Issue 52's chat: the answer's text arrives in pieces before the checked answer replaces it; the corpus
    picker lists only the corpora the employee may see and narrows the question; starter questions on an empty
    thread; regenerate, copy and stop; a conversation renamed with the keyboard, found by search, deleted."""
    ingest(world.shared, "Expense Policy", "Meals on business trips are reimbursed up to 40 EUR per day. "
                                           "Taxi rides after 22:00 are reimbursed up to 60 EUR.")
    employee = get_user_model().objects.create_user(username="fay", password="chat-horse-9")
    make_membership(employee, world.a, "reader", departments=[world.sales])
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "fay")
    page.fill("#id_password", "chat-horse-9")
    page.click("button[type=submit]")
    page.wait_for_selector("#question")

    # One mode note in the page; starters from the titles fay may see; a picker of her corpora only.
    assert "Offline mode" in page.inner_text("#mode-note")
    starters = page.locator("#starters button").all_inner_texts()
    assert "What does Expense Policy say about meals?" in starters and not any("Runbook" in s for s in starters), starters
    page.click("#corpora summary")
    names = page.locator("#corpora label").all_inner_texts()
    assert sorted(n.strip() for n in names) == ["sales-only", "shared"], names

    # The text streams in: pieces appended to the draft before the checked answer replaces it.
    page.evaluate("""() => { window.pieces = 0; window.answered = false;
        new MutationObserver((records) => { for (const r of records) for (const n of r.addedNodes) {
            if (n.nodeType === 3 && n.parentElement?.classList.contains('draft') && !window.answered) window.pieces++;
            if (n.nodeType === 1 && n.classList.contains('a')) window.answered = true; } })
          .observe(document.getElementById('messages'), {childList: true, subtree: true}); }""")
    page.locator("#starters button", has_text="What does Expense Policy say about meals?").click()
    page.wait_for_selector(".turn:nth-child(1) .a")
    page.wait_for_selector("#send:not([disabled])")  # the page is done with that answer (threads reloaded)
    assert page.evaluate("window.pieces") >= 2
    first = page.locator(".turn").nth(0)
    assert "40 EUR" in first.locator(".a").inner_text() and first.locator(".a li").count() >= 1  # Markdown list rendered
    assert "Extractive answer" not in first.inner_text() and page.locator("#starters").is_hidden()

    # Copy puts the answer on the clipboard with its sources listed.
    first.get_by_role("button", name="Copy the answer with its sources").click()
    page.wait_for_selector("text=Copied, with its sources.")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert "40 EUR" in copied and "Sources:\n[1] Expense Policy" in copied and "[c:" not in copied

    # Regenerate asks the same message again as the next turn.
    first.get_by_role("button", name="Ask again: What does Expense Policy say about meals?").click()
    page.wait_for_selector(".turn:nth-child(2) .a")
    page.wait_for_selector("#send:not([disabled])")  # the page is done with that answer (threads reloaded)
    assert page.locator(".turn").nth(1).locator(".q").inner_text() == "What does Expense Policy say about meals?"

    # Only sales-only ticked: the same question finds nothing (the policy is in shared).
    page.locator("#corpora label", has_text="shared").locator("input").uncheck()
    assert "sales-only" in page.inner_text("#corpora-summary")
    page.fill("#question", "How much are meals on business trips reimbursed?")
    page.keyboard.press("Enter")
    page.wait_for_selector(".turn:nth-child(3) .a")
    page.wait_for_selector("#send:not([disabled])")  # the page is done with that answer (threads reloaded)
    assert "Not enough evidence" in page.inner_text(".turn:nth-child(3) .a")
    page.locator("#corpora label", has_text="shared").locator("input").check()

    # Stop: while an answer runs, Stop is shown; pressing it ends the wait at once and says so.
    page.route("**/messages/stream/", lambda route: None)  # the server never answers this one
    page.fill("#question", "What about taxis?")
    page.keyboard.press("Enter")
    page.wait_for_selector("#stop:not([hidden])")
    page.click("#stop")
    page.wait_for_selector("text=Stopped.")
    page.wait_for_selector("#stop", state="hidden")
    assert page.locator("#send").is_enabled()
    page.unroute("**/messages/stream/")

    # Rename with the keyboard, find by search, delete.
    page.locator("#threads li button[aria-label^='Rename']").first.focus()
    page.keyboard.press("Enter")
    page.keyboard.type("My trip costs")  # the title is selected: typing replaces it
    page.keyboard.press("Enter")
    page.wait_for_selector("#threads button.open:text-is('My trip costs')")
    page.click("#new")
    assert page.locator("#starters").is_visible()
    page.locator("#starters button").first.click()
    page.wait_for_selector(".turn:nth-child(1) .a")
    page.wait_for_selector("#send:not([disabled])")  # the page is done with that answer (threads reloaded)
    page.wait_for_function("document.querySelectorAll('#threads li').length === 2")  # the list is read again after the answer
    page.fill("#thread-search", "TRIP COSTS")  # in the title only
    page.wait_for_function("document.querySelectorAll('#threads li').length === 1")
    assert page.inner_text("#threads").strip().startswith("My trip costs")
    shot(page, "chat-stream-1400")
    serious = axe_violations(page)
    assert serious == [], serious
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#threads li button[aria-label='Delete “My trip costs”']").click()
    page.wait_for_selector("text=Deleted “My trip costs”.", state="attached")
    page.fill("#thread-search", "")
    page.wait_for_function("document.querySelectorAll('#threads li').length === 1")
    assert "My trip costs" not in page.inner_text("#threads")

    # Every control has a name a screen reader can say; at phone width nothing scrolls sideways and Ask is on screen.
    unnamed = page.evaluate("""() => [...document.querySelectorAll('button, input, textarea, summary')]
        .filter((e) => e.offsetParent !== null)
        .filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || (e.id && document.querySelector(`label[for="${e.id}"]`))
                         || e.closest('label')))
        .map((e) => e.outerHTML.slice(0, 80))""")
    assert unnamed == [], unnamed
    page.set_viewport_size(PHONE)
    assert overflow(page)["x"] <= 0
    page.evaluate("window.scrollTo(0, document.scrollingElement.scrollHeight)")  # the question box ends the page
    shot(page, "chat-stream-phone")
    assert on_screen(page, page.locator("#send")) and on_screen(page, page.locator("#question")), \
        (page.locator("#send").bounding_box(), page.viewport_size)
