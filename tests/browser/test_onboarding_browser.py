"""Issue 52's onboarding, end to end in a real browser against a live server: an admin invites an employee
from the admin site, the employee sets a password from the invitation email's link, signs in, picks a
corpus, asks and sees the answer stream in (text events before `done`), renames and deletes a
conversation. At 1400 and 390 px the chat does not scroll sideways, every control can be scrolled to and
is not covered, and the Ask button is wholly on screen; axe-core finds no serious or critical violation on
the chat (both widths) or on three admin pages (the members list, "Invite people", a member's change page).
Screenshots go to test-artifacts/ (git-ignored): onboarding-*.png, and the axe-core findings of every
impact per page scanned to onboarding-axe.txt.

The live server runs in this process (pytest-django's live_server thread), so the email the admin's
invitation sends lands in Django's test outbox (`mailoutbox`), where the employee's link is read."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.api.conftest import World, ingest, world  # noqa: F401  (fixture)
from tests.browser.test_admin_browser import ARTIFACTS, page, pytestmark, shot  # noqa: F401  (fixture, marks)
from tests.browser.test_chat_browser import PHONE, on_screen, overflow
from tests.factories import make_membership, make_staff_user

PASSWORD = "kestrel-blue-7219"
WIDE = {"width": 1400, "height": 1000}

# Counts the Server-Sent Events of every streamed answer the page reads, in order (window.sseEvents), from a
# copy of the response body: the page reads the other copy unchanged.
SSE_RECORDER = """(() => {
  window.sseEvents = [];
  const realFetch = window.fetch.bind(window);
  window.fetch = async (...args) => {
    const response = await realFetch(...args);
    const url = String(args[0] && args[0].url ? args[0].url : args[0]);
    if (!url.includes('/stream/') || !response.body) return response;
    const [mine, theirs] = response.body.tee();
    (async () => {
      const reader = mine.getReader(), decoder = new TextDecoder();
      let buffer = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, {stream: true});
        let end;
        while ((end = buffer.indexOf('\\n\\n')) >= 0) {
          const name = (buffer.slice(0, end).match(/^event: (.*)$/m) || [])[1];
          buffer = buffer.slice(end + 2);
          if (name) window.sseEvents.push(name);
        }
      }
    })();
    return new Response(theirs, {status: response.status, statusText: response.statusText, headers: response.headers});
  };
})();"""

# Every control shown on the page, scrolled into view one by one: each must then lie wholly inside the
# window and be the element found at its own centre (not covered by another), and be reachable by Tab.
UNREACHABLE_CONTROLS = """() => {
  const problems = [];
  const controls = [...document.querySelectorAll('a[href], button, input:not([type=hidden]), textarea, select, summary')]
    .filter((e) => e.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true}));  // not in a closed <details>
  for (const e of controls) {
    e.scrollIntoView({block: 'center', inline: 'center'});
    const r = e.getBoundingClientRect();
    const name = e.outerHTML.slice(0, 90);
    if (r.width === 0 || r.height === 0) continue;  // collapsed (e.g. a visually hidden label's control)
    if (r.left < 0 || r.top < 0 || r.right > innerWidth + 0.5 || r.bottom > innerHeight + 0.5) {
      problems.push(`off screen ${Math.round(r.left)},${Math.round(r.top)} ${Math.round(r.width)}x${Math.round(r.height)}: ${name}`);
      continue;
    }
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    const label = e.closest('label') || (e.id && document.querySelector(`label[for="${e.id}"]`));
    if (!(hit && (hit === e || e.contains(hit) || (label && label.contains(hit))))) {
      problems.push(`covered by ${hit ? hit.outerHTML.slice(0, 60) : 'nothing'}: ${name}`);
    }
    if (e.tabIndex < 0 || e.disabled) problems.push(`not reachable by Tab: ${name}`);
  }
  window.scrollTo(0, 0);
  return problems;
}"""


def axe_scan(tab, name: str) -> None:
    """axe-core over the page as it is now: no serious or critical violation. Every violation found, of any
    impact, is written to test-artifacts/onboarding-axe.txt (one line per page scanned)."""
    axe = pytest.importorskip("axe_playwright_python.sync_playwright").Axe()
    found = axe.run(tab).response["violations"]
    counts = Counter(v.get("impact") or "unknown" for v in found)
    with (ARTIFACTS / "onboarding-axe.txt").open("a") as report:
        report.write(f"{name}: {dict(counts) or 'no violations'}; " + "; ".join(v["id"] for v in found) + "\n")
    serious = [f"{v['id']}: {v['nodes'][0]['html'][:120]}" for v in found if v.get("impact") in ("serious", "critical")]
    assert serious == [], (name, serious)


def check_layout(tab, name: str) -> None:
    """The chat at the window's width: no sideways scroll, every control reachable, Ask wholly on screen,
    no serious axe violation; a screenshot (the page, then the question box at the end of it)."""
    assert overflow(tab)["x"] <= 0, (name, overflow(tab))
    problems = tab.evaluate(UNREACHABLE_CONTROLS)
    assert problems == [], (name, problems)
    send = tab.locator("#send")
    send.scroll_into_view_if_needed()
    assert on_screen(tab, send) and send.is_enabled(), (name, send.bounding_box(), tab.viewport_size)
    question = tab.locator("#question")
    assert on_screen(tab, question), (name, question.bounding_box())
    box, button = question.bounding_box(), send.bounding_box()
    assert box["x"] + box["width"] <= button["x"], (name, box, button)  # side by side, not overlapping
    axe_scan(tab, f"chat {name}")
    shot(tab, f"onboarding-chat-{name}")


def admin_page_is_accessible(tab, name: str) -> None:
    """An admin page: no serious axe violation, no sideways scroll; a screenshot."""
    axe_scan(tab, f"admin {name}")
    assert overflow(tab)["x"] <= 0, (name, overflow(tab))
    shot(tab, f"onboarding-admin-{name}")


def test_an_invited_employee_sets_a_password_signs_in_asks_and_manages_conversations(live_server, world: World, page,  # noqa: F811
                                                                                     mailoutbox):
    ingest(world.shared, "Expense Policy", "Meals on business trips are reimbursed up to 40 EUR per day. "
                                           "Taxi rides after 22:00 are reimbursed up to 60 EUR.")
    admin = make_staff_user("grace", "correct-horse-9", first_name="Grace", last_name="Hopper")
    make_membership(admin, world.a, "admin", all_departments=True)

    # The admin invites an employee from the members list.
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "grace")
    page.fill("#id_password", "correct-horse-9")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    page.goto(f"{live_server.url}/admin/tenants/membership/")
    page.click("text=Invite people")
    page.wait_for_selector("#invite-form")
    assert page.locator('label[for=""]').count() == 0  # the departments' label names their group, not nothing
    assert page.get_by_role("group", name="Departments:").locator("input[type=checkbox]").count() >= 2
    (ARTIFACTS / "onboarding-axe.txt").write_text("")
    admin_page_is_accessible(page, "invite")
    page.fill("#id_email", "erin@example.com")
    page.select_option("#id_role", "reader")
    page.get_by_label("Sales", exact=True).check()
    page.click("input[name=_invite]")
    page.wait_for_selector("ul.messagelist")
    assert "Invitation sent to erin@example.com" in page.inner_text("ul.messagelist")
    assert "erin@example.com" in page.inner_text("#result_list")
    admin_page_is_accessible(page, "members")
    page.locator("#result_list a", has_text="erin").first.click()
    page.wait_for_selector("#membership_form")
    admin_page_is_accessible(page, "member")

    # The employee follows the emailed link, chooses a password and lands in the chat.
    (message,) = mailoutbox
    assert message.to == ["erin@example.com"] and "Grace Hopper" in message.body
    link = re.search(r"https?://\S+/invite/\S+", message.body).group(0)
    employee = page.context.browser.new_page(viewport=WIDE)
    employee.set_default_timeout(20_000)
    employee.add_init_script(SSE_RECORDER)
    employee.goto(link)
    sign_in_name = employee.inner_text("#sign-in-name")
    assert sign_in_name == f"erin@{world.a.slug}"
    employee.fill("#id_new_password1", PASSWORD)
    employee.fill("#id_new_password2", PASSWORD)
    employee.click("button[type=submit]")
    employee.wait_for_selector("#question")
    assert employee.url == f"{live_server.url}/"

    # Signs out and in again with the sign-in name the page showed.
    employee.click("header.top button[type=submit]")
    employee.wait_for_selector("#id_username")
    employee.fill("#id_username", sign_in_name)
    employee.fill("#id_password", PASSWORD)
    employee.click("button[type=submit]")
    employee.wait_for_selector("#question")
    check_layout(employee, "empty-1400")

    # Picks one corpus of the two erin may read (Sales' own and the tenant-wide one, never Engineering's).
    employee.click("#corpora summary")
    names = sorted(n.strip() for n in employee.locator("#corpora label").all_inner_texts())
    assert names == ["sales-only", "shared"], names
    employee.locator("#corpora label", has_text="sales-only").locator("input").uncheck()
    assert "shared" in employee.inner_text("#corpora-summary")

    # Asks; the answer's text arrives in pieces (text events, shown as a draft) before the checked answer.
    employee.evaluate("""() => { window.pieces = 0; window.answered = false;
        new MutationObserver((records) => { for (const r of records) for (const n of r.addedNodes) {
            if (n.nodeType === 3 && n.parentElement?.classList.contains('draft') && !window.answered) window.pieces++;
            if (n.nodeType === 1 && n.classList.contains('a')) window.answered = true; } })
          .observe(document.getElementById('messages'), {childList: true, subtree: true}); }""")
    employee.fill("#question", "What does the Expense Policy say about meals?")
    employee.click("#send")
    employee.wait_for_selector(".turn:nth-child(1) .a")
    employee.wait_for_function("window.sseEvents.includes('done')")
    events = employee.evaluate("window.sseEvents")
    before_done = events[:events.index("done")]
    assert before_done.count("text") >= 2 and before_done.index("text") < before_done.index("answer"), events
    assert employee.evaluate("window.pieces") >= 2
    assert "40 EUR" in employee.inner_text(".turn:nth-child(1) .a")
    employee.wait_for_function("!document.getElementById('send').disabled")  # the page has finished the answer
    check_layout(employee, "answer-1400")

    # Renames the conversation with the keyboard, then deletes it.
    employee.locator("#threads li button[aria-label^='Rename']").first.focus()
    employee.keyboard.press("Enter")
    employee.keyboard.type("Meal allowance")
    employee.keyboard.press("Enter")
    employee.wait_for_selector("#threads button.open:text-is('Meal allowance')")
    employee.fill("#question", "And what about taxi rides?")
    employee.click("#send")
    employee.wait_for_selector(".turn:nth-child(2) .a")

    employee.set_viewport_size(PHONE)
    employee.wait_for_function("!document.getElementById('send').disabled")  # the page has finished the answer
    check_layout(employee, "answer-390")
    employee.evaluate("window.scrollTo(0, document.scrollingElement.scrollHeight)")
    assert on_screen(employee, employee.locator("#send"))
    shot(employee, "onboarding-chat-answer-390-screen", full_page=False)  # what the phone's screen shows
    employee.set_viewport_size(WIDE)

    employee.once("dialog", lambda dialog: dialog.accept())
    employee.locator("#threads li button[aria-label='Delete “Meal allowance”']").click()
    employee.wait_for_selector("text=Deleted “Meal allowance”.", state="attached")
    employee.wait_for_function("document.querySelectorAll('#threads li').length === 0")
    assert "Meal allowance" not in employee.inner_text("#threads")
    employee.close()
