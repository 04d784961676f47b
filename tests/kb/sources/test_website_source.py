"""Website sources against a small site served on loopback: sitemap, robots.txt, a page over the size
limit, a redirect off the host, a slow page, a corrupt PDF, and pages added, changed, removed and
moved between mapped paths."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kb.models import Chunk
from kb.sources.services import source_create
from tenants.scope import activate
from tests.kb.sources.conftest import changes, corpus_state, items

pytestmark = pytest.mark.django_db


def page(title: str, *links: str, extra: str = "") -> bytes:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    body = "".join(f"<p>{title} rule {i}: submit form {i} to the office within {i + 1} days.</p>" for i in range(3))
    return (f"<!doctype html><html><head><title>{title}</title><script>var secret='script text';</script></head>"
            f"<body><nav><ul>{anchors}</ul></nav><main><h1>{title}</h1>{body}{extra}</main></body></html>").encode()


class Site:
    """path -> (status, content type, body, headers); `slow` paths sleep first."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, str, bytes, dict]] = {}
        self.slow: set[str] = set()
        self.hits: list[str] = []

    def html(self, path: str, body: bytes) -> None:
        self.pages[path] = (200, "text/html; charset=utf-8", body, {})


@pytest.fixture
def site():
    s = Site()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            s.hits.append(self.path)
            if self.path in s.slow:
                time.sleep(5)
            status, ctype, body, headers = s.pages.get(self.path, (404, "text/plain", b"not found", {}))
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    s.base = f"http://127.0.0.1:{server.server_address[1]}"
    base = s.base
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
    s.slow.add("/slow")
    s.html("/private/salaries", page("Salaries"))
    s.pages["/files/scan.pdf"] = (200, "application/pdf", b"%PDF-1.4 this is not really a pdf", {})
    yield s
    server.shutdown()
    server.server_close()


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
    with activate(scope):
        text = " ".join(Chunk.objects.for_scope(scope).filter(corpus=world["corpus"]).values_list("text", flat=True))
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


def test_two_sync_requests_at_once_join_one_sync(world, web_source):
    from kb.models import SourceSync
    from kb.sources.sync import request_sync

    scope = world["scope"]
    with activate(scope):  # no broker: the first request's sync would run after commit, so the second finds it queued
        a, created_a = request_sync(scope=scope, source=web_source)
        b, created_b = request_sync(scope=scope, source=web_source)
        assert SourceSync.objects.for_scope(scope).filter(source=web_source).count() == 1
    assert created_a and not created_b and a.pk == b.pk
