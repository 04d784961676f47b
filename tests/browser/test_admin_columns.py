"""Issue 52: the admin's lists fit a 1400 px screen. The runs list shows Outcome, Feedback and Latency, the
documents list shows Size whole, the chunk browser breaks no word of a locator and wraps the text; no list
scrolls sideways. Skipped without /usr/bin/chromium (like the other browser tests)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from agents.services import ask
from kb.ingest import run_ingest_job, upload_document
from tenants.scope import activate
from tests.api.conftest import World, ingest, world  # noqa: F401  (fixture)
from tests.browser.test_admin_browser import CHROMIUM, page, shot  # noqa: F401  (fixture; skip marker's path)
from tests.factories import make_membership, make_staff_user, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, databases=["default", "owner"]),
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs /usr/bin/chromium"),
]

FITS = """(names) => {
    const table = document.querySelector('#result_list');
    const box = table.getBoundingClientRect();
    // Django's list scrolls sideways inside its own box (.results), beside the filters: what is past its right edge is cut.
    const results = table.closest('.results') || table.parentElement;
    const shown = results.getBoundingClientRect();
    const out = {pageOverflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
                 listOverflow: results.scrollWidth - results.clientWidth,
                 tableRight: box.right, viewport: Math.min(window.innerWidth, shown.right), columns: {}};
    for (const name of names) {
        const cells = [...table.querySelectorAll(`th.column-${name}, td.field-${name}`)];
        out.columns[name] = cells.length ? {
            right: Math.max(...cells.map((c) => c.getBoundingClientRect().right)),
            clipped: cells.some((c) => c.scrollWidth > c.clientWidth + 1),
        } : null;
    }
    return out;
}"""

# Words of the locator cells broken across lines: a word whose text spans more than one line box.
BROKEN_WORDS = """() => {
    const broken = [];
    for (const cell of document.querySelectorAll('#result_list td.field-locator')) {
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const re = /\\S+/g;
            let m;
            while ((m = re.exec(node.data))) {
                const range = document.createRange();
                range.setStart(node, m.index);
                range.setEnd(node, m.index + m[0].length);
                const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
                if (tops.size > 1) broken.push(m[0]);
            }
        }
    }
    return broken;
}"""


def check_fits(browser_page, names: list[str]) -> None:
    got = browser_page.evaluate(FITS, names)
    assert got["pageOverflow"] <= 0 and got["listOverflow"] <= 0, got  # nothing scrolls sideways
    assert got["tableRight"] <= got["viewport"] + 0.5, got
    for name in names:
        column = got["columns"][name]
        assert column is not None, (name, got)
        assert column["right"] <= got["viewport"] and not column["clipped"], (name, got)


def test_admin_lists_fit_1400_px(live_server, world: World, page):  # noqa: F811
    user = make_staff_user("lin", "correct-horse-7")
    make_membership(user, world.a, "admin", all_departments=True)
    long_words = ("Reimbursement of international accommodation expenditures for contractors and subcontractors "
                  "(interdepartmental procurement guidelines). ")
    ingest(world.shared, "International accommodation and reimbursement guidelines for interdepartmental travel",
           "# Accommodation reimbursement guidelines\n\n## Interdepartmental subcontractors' accommodation\n\n" + long_words * 40)
    # A principal with no break opportunity (an API key's long name) and a long question: the widest run rows.
    long_key = replace(whole_tenant(world.a), principal="key:" + "integration-nightly-export-" * 3)
    for question in ("How much are hotels reimbursed per night for interdepartmental travel of subcontractors? " * 3,
                     "What is the accommodation reimbursement ceiling?"):
        ask(scope=long_key, question=question, strategy="classic", provider="offline")
    with activate(whole_tenant(world.a)):
        _, job = upload_document(scope=whole_tenant(world.a), corpus=world.shared, data=b"%PDF-1.4 not really a PDF " * 20,
                                 filename="quarterly-interdepartmental-procurement-report-2026-final-v3.pdf")
    run_ingest_job(job_id=job.id, tenant_id=world.a.id)  # fails: a long reason in the Why it failed column

    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "lin")
    page.fill("#id_password", "correct-horse-7")
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")

    page.goto(f"{live_server.url}/admin/agents/run/")
    check_fits(page, ["outcome", "feedback_col", "latency", "tokens", "short_question", "asked_by"])
    shot(page, "issue52-runs-1400")

    page.goto(f"{live_server.url}/admin/kb/document/")
    check_fits(page, ["size_bytes", "status", "updated_at", "failure", "title", "source_name"])
    shot(page, "issue52-documents-1400")

    page.goto(f"{live_server.url}/admin/kb/chunk/")
    check_fits(page, ["locator", "preview"])
    assert page.evaluate(BROKEN_WORDS) == []  # no word of a locator split across lines
    text = page.locator("#result_list td.field-preview").first
    assert text.evaluate("e => getComputedStyle(e).whiteSpace") == "normal"  # wrapped, not cut at the edge
    shot(page, "issue52-chunks-1400")
