"""Fixtures for source tests: a tenant with departments and a tenant-wide corpus (its folder granted,
loopback hosts allowed); `grant`/`revoke` (a tenant's source grants); the upstream servers on loopback
(an S3 API server, moto in server mode, and a small website); and `upstream`, a source's upstream of
any kind behind one interface, for the tests every kind must pass alike."""

from __future__ import annotations

import html
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import pytest
from django.db import connection, transaction
from moto.server import ThreadedMotoServer

from kb.models import Chunk, Corpus, Document, Source, SourceChange, SourceItem, SourceSync
from kb.sources.grants import grant_source, revoke_source_grant
from kb.sources.models import SourceGrant
from kb.sources.services import source_create
from kb.sources.sync import request_sync
from tenants.db_wall import grant_statements
from tenants.scope import Scope, activate
from tests.factories import department, make_tenant, whole_tenant

S3_ACCESS_KEY = "AKIACANARYSOURCE0001"
S3_SECRET_KEY = "s3-secret-canary-do-not-leak-1f2e3d4c5b6a"


def grant(tenant, kind: str, value: str, **extra) -> SourceGrant:
    """`tenant` granted a folder or host, as `manage.py grant_source` does, through the test's own
    connection (the owner connection's rows are invisible inside a test transaction), with the grant proof
    the operator-only trigger of kb 0009 asks of the application role."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(grant_statements(tenant.pk))
        try:
            return grant_source(tenant=tenant, kind=kind, value=value, using="default", granted_by="test", **extra)
        finally:  # SET LOCAL outlives the savepoint inside a test's transaction: the proof goes at once
            cur.execute(grant_statements(None))


def revoke(tenant, kind: str, value: str) -> int:
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(grant_statements(tenant.pk))
        try:
            return revoke_source_grant(tenant=tenant, kind=kind, value=value, using="default", granted_by="test")
        finally:
            cur.execute(grant_statements(None))


@pytest.fixture
def world(settings, tmp_path):
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    settings.SOURCES_ALLOW_PRIVATE_HOSTS = True
    tenant = make_tenant("Acme", departments=("HR", "Finance"))
    grant(tenant, "folder", str(tmp_path))
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Handbook", chunk_target_tokens=60, chunk_overlap_tokens=0)
    return {"tenant": tenant, "scope": scope, "corpus": corpus, "hr": department(tenant, "HR"),
            "finance": department(tenant, "Finance"), "root": tmp_path}


@pytest.fixture
def sync_now(django_capture_on_commit_callbacks):
    """sync_now(scope, source): request a sync, run it (and its ingest jobs) in process as after a
    commit (no broker in tests), and return it finished."""

    def run(scope, source) -> SourceSync:
        with django_capture_on_commit_callbacks(execute=True):
            sync, _ = request_sync(scope=scope, source=source)
        with activate(scope):
            return SourceSync.objects.for_scope(scope).get(pk=sync.pk)

    return run


# --- the S3 API server -----------------------------------------------------------------------------

class _SlowDownloads:
    """WSGI middleware in front of moto: each object download (GET /bucket/key) waits `delay` seconds."""

    def __init__(self, app) -> None:
        self.app = app
        self.delay = 0.0

    def __call__(self, environ, start_response):
        if self.delay and environ["REQUEST_METHOD"] == "GET" and "/" in environ.get("PATH_INFO", "").strip("/"):
            time.sleep(self.delay)
        return self.app(environ, start_response)


@pytest.fixture(scope="session")
def _moto():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    downloads = _SlowDownloads(server._server.app)
    server._server.app = downloads  # werkzeug's handler calls server.app per request
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}", downloads
    server.stop()


@pytest.fixture
def s3_server(_moto):
    """The S3 API server's endpoint URL (one server per test session, a bucket per test)."""
    url, downloads = _moto
    yield url
    downloads.delay = 0.0


@pytest.fixture
def bucket(s3_server):
    """(boto3 client, bucket name): a new empty bucket."""
    name = f"policies-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", aws_access_key_id=S3_ACCESS_KEY,
                          aws_secret_access_key=S3_SECRET_KEY)
    client.create_bucket(Bucket=name)
    return client, name


def put(bucket, key: str, text: str | bytes) -> None:
    client, name = bucket
    client.put_object(Bucket=name, Key=key, Body=text.encode() if isinstance(text, str) else text)


# --- the website --------------------------------------------------------------------------------------

class Site:
    """What the web server answers: path -> (status, content type, body, headers), 404 for the rest;
    a path in `slow` waits that many seconds first; `hits` lists the paths asked for."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, str, bytes, dict]] = {}
        self.slow: dict[str, float] = {}
        self.hits: list[str] = []
        self.base = ""

    def html(self, path: str, body: bytes) -> None:
        self.pages[path] = (200, "text/html; charset=utf-8", body, {})


@pytest.fixture
def web_server():
    """An empty Site served on loopback at `site.base`."""
    s = Site()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            s.hits.append(self.path)
            if self.path in s.slow:
                time.sleep(s.slow[self.path])
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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    s.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield s
    server.shutdown()
    server.server_close()


# --- any kind -------------------------------------------------------------------------------------------

class Upstream:
    """Where a source of one kind reads. `put(name, text)` adds or changes an item (a Markdown file or
    object `<name>.md`, or an HTML page `/<name>` linked from the start page); `source()` attaches it
    to a corpus; `slow_down(seconds)` (S3 and website only) makes each item's download wait.
    `extra_documents`: documents a sync makes besides the items put (a website's start page)."""

    kind = ""
    extra_documents = 0
    credentials: dict = {}

    def put(self, name: str, text: str) -> None:
        raise NotImplementedError

    def config(self) -> dict:
        raise NotImplementedError

    def source(self, scope: Scope, corpus: Corpus, name: str = "Upstream") -> Source:
        return source_create(scope=scope, corpus=corpus, name=name, kind=self.kind, config=self.config(),
                             credentials=self.credentials)


class FolderUpstream(Upstream):
    kind = "folder"

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, text: str) -> None:
        path = self.root / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def config(self) -> dict:
        return {"path": str(self.root)}


class S3Upstream(Upstream):
    kind = "s3"
    credentials = {"access_key_id": S3_ACCESS_KEY, "secret_access_key": S3_SECRET_KEY}

    def __init__(self, bucket, url: str, downloads: _SlowDownloads) -> None:
        self.bucket, self.url, self.downloads = bucket, url, downloads

    def put(self, name: str, text: str) -> None:
        put(self.bucket, f"{name}.md", text)

    def slow_down(self, seconds: float) -> None:
        """Each object download waits `seconds` (0: no wait)."""
        self.downloads.delay = seconds

    def config(self) -> dict:
        return {"bucket": self.bucket[1], "endpoint_url": self.url}


class SiteUpstream(Upstream):
    kind = "website"
    extra_documents = 1

    def __init__(self, site: Site) -> None:
        self.site = site
        self.paths: list[str] = []
        self._index()

    def put(self, name: str, text: str) -> None:
        path = f"/{name}"
        paragraphs = "".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n\n"))
        self.site.html(path, f"<!doctype html><html><body><main>{paragraphs}</main></body></html>".encode())
        if path not in self.paths:
            self.paths.append(path)
            self._index()

    def _index(self) -> None:
        links = "".join(f'<a href="{p}">{p}</a> ' for p in self.paths)
        self.site.html("/", f"<!doctype html><html><body><h1>Index</h1>{links}</body></html>".encode())

    def slow_down(self, seconds: float) -> None:
        """Each page but the start page waits `seconds` (0: no wait)."""
        self.site.slow = dict.fromkeys(self.paths, seconds) if seconds else {}

    def config(self) -> dict:
        return {"start_url": self.site.base + "/"}


@pytest.fixture
def upstream(request, world) -> Upstream:
    """An empty upstream of the kind named by indirect parametrisation ("folder", "s3", "website");
    only that kind's server is started."""
    if request.param == "folder":
        return FolderUpstream(world["root"] / "share")
    if request.param == "s3":
        url = request.getfixturevalue("s3_server")  # which puts the download delay back to 0 after the test
        return S3Upstream(request.getfixturevalue("bucket"), url, request.getfixturevalue("_moto")[1])
    if request.param == "website":
        return SiteUpstream(request.getfixturevalue("web_server"))
    raise ValueError(f"no upstream of kind {request.param!r}")


# --- reading the corpus back ----------------------------------------------------------------------

def corpus_state(scope, corpus) -> dict[str, tuple]:
    """source key -> (department id, status, chunk count, chunk departments) of every document."""
    with activate(scope):
        docs = list(Document.objects.for_scope(scope).filter(corpus=corpus))
        out = {}
        for d in docs:
            depts = set(Chunk.objects.for_scope(scope).filter(document=d).values_list("department_id", flat=True))
            out[d.source_name.split(":", 2)[2]] = (d.department_id, d.status, d.chunk_count, depts)
        return out


def chunk_rows(scope, corpus) -> list[tuple]:
    with activate(scope):
        return list(Chunk.objects.for_scope(scope).filter(corpus=corpus).values_list("document_id", "ordinal"))


def chunk_text(scope, corpus) -> str:
    """Every chunk text of the corpus, joined: what search can find."""
    with activate(scope):
        return " ".join(Chunk.objects.for_scope(scope).filter(corpus=corpus).values_list("text", flat=True))


def changes(scope, sync) -> list[tuple[str, str]]:
    with activate(scope):
        return sorted(SourceChange.objects.for_scope(scope).filter(sync_id=sync.pk).values_list("action", "key"))


def items(scope, source) -> dict[str, SourceItem]:
    with activate(scope):
        return {i.key: i for i in SourceItem.objects.for_scope(scope).filter(source=source)}


__all__ = ["Site", "Upstream", "changes", "chunk_rows", "chunk_text", "corpus_state", "grant", "items", "put", "revoke",
           "source_create"]
