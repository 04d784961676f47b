"""Issue 52: an admin adds a folder source through its form in a real browser (no JSON typed: the kind's
fields, a department picked by name), sees its first sync finish without pressing "sync now", the sync
summary's legend, and file-name titles in the document list and in the chat's citations. Skipped without
/usr/bin/chromium."""

from __future__ import annotations

import os

import pytest

from tests.api.conftest import World, world  # noqa: F401  (fixture)
from tests.browser.test_admin_browser import CHROMIUM, page, shot  # noqa: F401  (fixture)
from tests.factories import make_membership, make_staff_user
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.sources.conftest import grant

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, databases=["default", "owner"]),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs /usr/bin/chromium"),
]


def test_a_folder_source_is_added_through_its_form_and_synced_at_once(live_server, world: World, page, tmp_path,  # noqa: F811
                                                                         settings):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    grant(world.a, "folder", str(tmp_path))
    share = tmp_path / "share"
    (share / "sales").mkdir(parents=True)
    (share / "canteen.md").write_text("The canteen opens at 11:30 and serves soup on Fridays.")
    (share / "sales" / "discounts.txt").write_text("The discount ceiling is 20 percent for every customer.")
    user = make_staff_user("mo", "correct-horse-6")
    make_membership(user, world.a, "admin", all_departments=True)

    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "mo")
    page.fill("#id_password", "correct-horse-6")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")

    page.goto(f"{live_server.url}/admin/kb/source/add/")
    page.fill("#id_name", "Shared drive")
    page.select_option("#id_corpus", label="shared")
    page.select_option("#id_kind", "website")
    assert page.locator("#id_website_start_url").is_visible() and not page.locator("#id_folder_path").is_visible()
    page.select_option("#id_kind", "folder")
    assert page.locator("#id_folder_path").is_visible() and not page.locator("#id_s3_bucket").is_visible()
    page.fill("#id_folder_path", str(share / "missing"))
    page.fill("#id_rule_prefix_0", "sales/")
    page.select_option("#id_rule_department_0", label="Sales")
    page.click("input[name=_continue]")
    error = page.locator(".field-folder_path .errorlist").inner_text()
    assert "cannot be opened" in error  # the connection test, on the field at fault; nothing saved
    shot(page, "issue52-source-form-error")

    page.fill("#id_folder_path", str(share))
    page.click("input[name=_test_connection]")
    assert "Nothing is saved yet" in page.inner_text("ul.messagelist")
    assert page.locator("#id_folder_path").input_value() == str(share)  # the form comes back as typed
    assert page.locator("#id_rule_department_0 option:checked").inner_text() == "Sales"
    page.click("input[name=_continue]")
    messages = page.inner_text("ul.messagelist")
    assert "Connection tested: canteen.md, sales/discounts.txt" in messages and "first sync is queued" in messages
    recent = page.inner_text("fieldset:has(h2:text('Recent syncs'))")
    assert "done" in recent and "+ added" in recent  # finished without "sync now" (no broker in tests: after commit)
    shot(page, "issue52-source-change-page")

    page.goto(f"{live_server.url}/admin/kb/source/")
    assert "done: +2" in page.inner_text("#result_list")
    assert "moved" in page.inner_text("#sync-legend")
    assert "+ added" in page.locator("#result_list .sync-summary").first.get_attribute("title")

    page.goto(f"{live_server.url}/admin/kb/document/?q=folder")
    titles = page.locator("#result_list td.field-title, #result_list th.field-title").all_inner_texts()
    assert sorted(t.strip() for t in titles) == ["canteen", "discounts"], titles
    shot(page, "issue52-source-documents")

    # The chat cites the synced document by its title, never by the source's key (folder:<id>:canteen).
    page.goto(f"{live_server.url}/")
    page.fill("#question", "When does the canteen open?")
    page.click("#send")
    page.wait_for_selector(".turn:nth-child(1) .a")
    page.wait_for_function("!document.getElementById('send').disabled")
    cited = page.locator(".turn:nth-child(1) .a button[aria-label^='Source']").first
    assert cited.get_attribute("aria-label").endswith(": canteen"), cited.get_attribute("aria-label")
    cited.click()
    assert page.inner_text("#source-title") == "canteen"
    assert "folder:" not in page.inner_text(".turn:nth-child(1)")
    shot(page, "issue52-source-cited")
