"""Website sources against a small site served on loopback: sitemap, robots.txt, a page over the size
limit, a redirect off the host, a slow page, a corrupt PDF, and pages added, changed, removed and
moved between mapped paths."""

from __future__ import annotations

import pytest

from kb.sources.services import source_create
from tests.kb.sources.conftest import changes, chunk_text, corpus_state, items

pytestmark = pytest.mark.django_db


def page(title: str, *links: str, extra: str = "") -> bytes:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    body = "".join(f"<p>{title} rule {i}: submit form {i} to the office within {i + 1} days.</p>" for i in range(3))
    return (f"<!doctype html><html><head><title>{title}</title><script>var secret='script text';</script></head>"
            f"<body><nav><ul>{anchors}</ul></nav><main><h1>{title}</h1>{body}{extra}</main></body></html>").encode()


@pytest.fixture
def site(web_server):
    s, base = web_server, web_server.base
    s.pages["/robots.txt"] = (200, "text/plain", b"User-agent: *\nDisallow: /private/\n", {})
    s.pages["/sitemap.xml"] = (200, "application/xml", (
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<url><loc>{base}/hr/orphan</loc></url><url><loc>http://elsewhere.invalid/x</loc></url></urlset>").encode(), {})
    s.html("/", page("Home", "/hr/leave", "/finance/travel", "/big", "/away", "/slow", "/private/salaries", "/files/scan.pdf",
                     "mailto:hr@example.com", "http://elsewhere.invalid/page"))
    s.html("/hr/leave", page("Leave", "/"))
    s.html("/hr/orphan", page("Orphan"))
    s.html("/finance/travel", page("Travel"))
    s.html("/big", page("Big", extra="<p>" + "padding " * 5000 + "</p>"))
    s.pages["/away"] = (302, "text/html", b"", {"Location": "http://elsewhere.invalid/landing"})
    s.html("/slow", page("Slow"))
    s.slow["/slow"] = 5  # over the source's 2 s timeout
    s.html("/private/salaries", page("Salaries"))
    s.pages["/files/scan.pdf"] = (200, "application/pdf", b"%PDF-1.4 this is not really a pdf", {})
    return s


@pytest.fixture
def web_source(world, site):
    return source_create(scope=world["scope"], corpus=world["corpus"], name="Intranet", kind="website",
                         config={"start_url": site.base + "/", "sitemap_url": site.base + "/sitemap.xml",
                                 "max_page_bytes": 20000, "timeout_seconds": 2, "max_depth": 3},
                         department_rules=[{"prefix": "/hr/", "department": world["hr"].pk},
                                           {"prefix": "/finance/", "department": world["finance"].pk}])


def test_crawl_respects_host_robots_and_limits_and_each_bad_page_fails_alone(world, site, web_source, sync_now):
    scope = world["scope"]
    sync = sync_now(scope, web_source)
    state = corpus_state(scope, world["corpus"])
    assert set(state) == {"/", "/hr/leave", "/hr/orphan", "/finance/travel"}
    hr, fin = world["hr"].pk, world["finance"].pk
    assert {k: (v[0], v[1]) for k, v in state.items()} == {
        "/": (None, "ready"), "/hr/leave": (hr, "ready"), "/hr/orphan": (hr, "ready"), "/finance/travel": (fin, "ready")}
    it = items(scope, web_source)
    assert "larger than 20000 bytes" in it["/big"].error
    assert "off the site" in it["/away"].error and "elsewhere.invalid" in it["/away"].error
    assert it["/slow"].error == "timed out"
    assert "parse error" in it["/files/scan.pdf"].error
    assert (sync.status, sync.added, sync.failed, sync.complete_listing) == ("done", 4, 4, True)
    assert "/private/salaries" not in site.hits  # robots.txt
    text = chunk_text(scope, world["corpus"])
    assert "script text" not in text and "Leave rule 2" in text  # cleaned by the HTML parser


def test_pages_added_changed_removed_and_moved_are_mirrored(world, site, web_source, sync_now):
    scope = world["scope"]
    site.slow.clear()
    sync_now(scope, web_source)
    second = sync_now(scope, web_source)
    assert (second.added, second.changed, second.removed) == (0, 0, 0)

    site.html("/hr/leave", page("Leave", "/", "/hr/new", extra="<p>Leave rule 9: sabbaticals after five years.</p>"))
    site.html("/hr/new", page("New starters"))
    del site.pages["/hr/orphan"]
    site.pages["/finance/travel-moved"] = site.pages.pop("/finance/travel")
    site.html("/", page("Home", "/hr/leave", "/hr/travel"))
    site.pages["/hr/travel"] = site.pages.pop("/finance/travel-moved")
    third = sync_now(scope, web_source)
    assert ("added", "/hr/new") in changes(scope, third) and ("changed", "/hr/leave") in changes(scope, third)
    assert ("removed", "/hr/orphan") in changes(scope, third) and ("moved", "/hr/travel") in changes(scope, third)
    state = corpus_state(scope, world["corpus"])
    hr = world["hr"].pk
    assert state["/hr/travel"][0] == hr and state["/hr/travel"][3] == {hr}
    assert "/hr/orphan" not in state and "/finance/travel" not in state
    text = chunk_text(scope, world["corpus"])
    assert "Leave rule 9: sabbaticals after five years." in text and "New starters rule 0" in text  # changed, added
    assert "Orphan" not in text  # removed: gone from search
    assert text.count("Travel rule 0") == 1  # moved: its chunks kept, not duplicated


def test_a_crawl_stopped_by_a_limit_removes_nothing(world, site, web_source, sync_now):
    from kb.sources.services import source_update

    scope = world["scope"]
    site.slow.clear()
    sync_now(scope, web_source)
    before = set(corpus_state(scope, world["corpus"]))
    source_update(scope=scope, source=web_source, config={"start_url": site.base + "/", "max_pages": 2})
    sync = sync_now(scope, web_source)
    assert sync.complete_listing is False and sync.removed == 0
    assert set(corpus_state(scope, world["corpus"])) == before
