"""A real browser against a live server: log into the admin, upload a document, see it ingested, ask
in the playground, open the run in the audit review and see its citations. Screenshots go to
test-artifacts/ (git-ignored)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.api.conftest import World, world  # noqa: F401  (fixture)
from tests.factories import make_membership, make_staff_user
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, databases=["default", "owner"]),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs /usr/bin/chromium"),
]


@pytest.fixture
def page(monkeypatch):
    sync_api = pytest.importorskip("playwright.sync_api")
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 1000})
            pg.set_default_timeout(20_000)
            yield pg
        finally:
            browser.close()


def shot(page, name: str, *, full_page: bool = True) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def contrast(locator) -> float:
    """WCAG contrast ratio of an element's text colour against the first opaque background behind it."""
    return locator.evaluate("""e => {
        const rgb = (s) => s.match(/[\\d.]+/g).map(Number);
        const lum = (c) => c.slice(0, 3).map((v) => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
                            .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
        let at = e;
        while (at && (rgb(getComputedStyle(at).backgroundColor)[3] === 0)) at = at.parentElement;
        const back = at ? rgb(getComputedStyle(at).backgroundColor) : [255, 255, 255];
        const [hi, lo] = [lum(rgb(getComputedStyle(e).color)), lum(back)].sort((a, b) => b - a);
        return (hi + 0.05) / (lo + 0.05);
    }""")


def test_admin_upload_ingest_ask_and_review(live_server, world: World, page, tmp_path):  # noqa: F811
    user = make_staff_user("ada", "correct-horse-9")
    make_membership(user, world.a, "admin", all_departments=True)

    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "correct-horse-9")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    shot(page, "01-admin-home")

    policy = tmp_path / "expenses.md"
    policy.write_text("# Expenses\n\n## Taxis\n\nTaxi rides after 22:00 are reimbursed up to 60 EUR.\n")
    page.goto(f"{live_server.url}/admin/kb/document/upload/")
    page.select_option("#id_corpus", label="shared")
    page.set_input_files("#id_files", str(policy))
    page.fill("#id_metadata", '{"category": "finance"}')
    page.click("input[name=_upload]")
    page.wait_for_selector("ul.messagelist")
    assert "Uploaded 1 document" in page.inner_text("ul.messagelist")
    page.goto(f"{live_server.url}/admin/kb/document/?q=expenses")
    row = page.locator("#result_list tbody tr").first
    assert "ready" in row.inner_text().lower()  # ingested (eager tasks run right after the upload committed)
    shot(page, "02-document-ingested")

    page.goto(f"{live_server.url}/admin/agents/run/ask/")
    page.select_option("#id_act_as", index=0)
    page.fill("#id_question", "Up to how much are taxi rides after 22:00 reimbursed?")
    page.click("#playground-form input[type=submit]")
    page.wait_for_selector("#answer")
    shot(page, "03-playground-answer")
    page.click("text=open in audit review")
    page.wait_for_selector("#citations")
    citations = page.inner_text("#citations")
    assert "verified" in citations and "chunk" in citations
    page.locator("#citations details summary").first.click()
    assert "60 EUR" in page.locator("#citations .chunk-text").first.inner_text()
    assert "intact" in page.inner_text("#chain-status")
    shot(page, "04-run-review-citations")

    page.goto(f"{live_server.url}/admin/agents/run/")
    assert "taxi rides" in page.inner_text("#result_list").lower()
    shot(page, "05-run-list")


def test_admin_pages_as_their_users_find_them(live_server, world: World, page, tmp_path):  # noqa: F811
    """Each admin finding of the chat/MCP issue, checked in the page a user sees and kept as a screenshot."""
    user = make_staff_user("grace", "correct-horse-9")
    make_membership(user, world.a, "admin", all_departments=True)
    other = make_staff_user("ada", "correct-horse-8")  # a member listed before the signed-in admin
    make_membership(other, world.a, "reader", departments=[world.eng])

    page.goto(f"{live_server.url}/admin/login/")
    assert "Django" not in page.title() and "grounded" in page.title()
    page.fill("#id_username", "grace")
    page.fill("#id_password", "correct-horse-9")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    home = page.inner_text("#content")
    assert "API keys" in home and "Api keys" not in home
    assert "grounded administration" in page.inner_text("#site-name") and "Django" not in page.title()
    shot(page, "admin-fix-01-home-branding-api-keys")

    # Two copies of one policy (PDF-like text and HTML) and a file that cannot be parsed.
    (tmp_path / "travel.md").write_text("# Travel\n\nHotels are reimbursed up to 150 EUR per night. " * 30)
    (tmp_path / "travel.html").write_text("<html><head><title>Travel</title></head><body><h1>Travel</h1>"
                                          + "<p>Hotels are reimbursed up to 150 EUR per night.</p>" * 30 + "</body></html>")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a PDF")
    page.goto(f"{live_server.url}/admin/kb/document/upload/")
    page.select_option("#id_corpus", label="shared")
    page.set_input_files("#id_files", [str(tmp_path / n) for n in ("travel.md", "travel.html", "broken.pdf")])
    page.click("input[name=_upload]")
    page.wait_for_selector("ul.messagelist")
    page.goto(f"{live_server.url}/admin/kb/document/")
    table = page.inner_text("#result_list")
    assert "travel.md" in table and "travel.html" in table  # the file name tells the two copies apart
    failed = page.locator("#result_list tbody tr", has_text="broken.pdf")
    assert "failed" in failed.locator("td.field-status").inner_text().lower()
    reason = failed.locator("td.field-failure").inner_text()
    assert reason.startswith("parse error: PDF is malformed"), reason  # why it failed, in the list (not just the file name)
    assert "done done" not in table.lower()
    shot(page, "admin-fix-02-documents-file-names-and-failure")

    page.goto(f"{live_server.url}/admin/kb/ingestjob/")
    jobs = page.inner_text("#result_list").lower()
    assert "done" in jobs and "done done" not in jobs and "100% done" not in jobs
    shot(page, "admin-fix-03-jobs-done-once")

    page.goto(f"{live_server.url}/admin/kb/chunk/")
    chunks = page.inner_text("#result_list")
    assert "part " in chunks and " of " in chunks and "#" not in chunks.split("\n")[1]  # "chunk N (part k of ...)", not "8#4"
    text_cell = page.locator("#result_list td.field-preview").first.bounding_box()
    assert text_cell is not None and text_cell["width"] >= 250  # text is readable, not squeezed to a few characters
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0  # the table fits the 1400 px page
    shot(page, "admin-fix-04-chunk-browser")

    page.goto(f"{live_server.url}/admin/agents/run/ask/")
    chosen = page.locator("#id_act_as option:checked").inner_text()
    assert "grace" in chosen and "ada" not in chosen  # the playground asks as the signed-in admin
    page.fill("#id_question", "How much are hotels reimbursed per night?")
    page.click("#playground-form input[type=submit]")
    page.wait_for_selector("#answer")
    acted = page.inner_text("#acted-scope")
    assert "role: admin" in acted and "{" not in acted  # the playground's own line about the scope, too
    healthz = page.locator("#providers-help a")
    assert healthz.inner_text() == "/healthz" and contrast(healthz) >= 3, contrast(healthz)  # not blue on blue
    page.click("text=open in audit review")
    page.wait_for_selector("#citations")
    scope = page.inner_text("#enforced-scope")
    assert "role: admin" in scope and "all departments: yes" in scope  # words, not a Python dict
    arguments = " ".join(page.locator("#timeline tr.step td:nth-child(3)").all_inner_texts())
    assert "query:" in arguments and "{" not in arguments  # step arguments and filters too (model output stays as it was)
    shot(page, "admin-fix-05-run-review-scope")
