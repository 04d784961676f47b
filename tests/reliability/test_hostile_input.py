"""Hostile input and fail-safe defaults (issue 29): each request that once answered 500 replayed, now a
400 naming the field; oversized filters refused before their contents are looked at; /api/ answering
JSON for 404 and 500 with DEBUG on; parsing limits (a DOCX zip bomb fails fast in bounded memory).

DEBUG is on in these tests wherever it changes what an error looks like: that is how `scripts/run
--debug` serves, and where a 500 used to show Django's technical page.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import psutil
import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from kb.ingest import run_ingest_job
from kb.models import Corpus, Document
from kb.parsing import ParseError, ParseLimitExceeded, ParseLimits, parse
from tenants.models import ApiKey
from tenants.scope import activate
from tests.factories import make_membership, make_staff_user, make_tenant, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.test_parsing import make_docx, make_pdf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hostile(db, settings):
    """An admin key's client on a tenant with one ingested document; DEBUG on."""
    settings.DEBUG = True
    settings.RATE_LIMIT_REDIS_URL = ""
    settings.RATE_LIMIT_PER_MINUTE = 100_000
    cache.clear()
    tenant = make_tenant("Acme")
    scope = whole_tenant(tenant)
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Handbook", embedding_model="hash", embedding_dim=64)
    _, raw = ApiKey.issue(tenant=tenant, name="admin", role="admin", all_departments=True)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client, tenant, scope, corpus


def _error(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    return response.json()["error"]


def _assert_400_on(response, field: str) -> dict:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    error = _error(response)
    assert field in error["fields"], error
    assert error["message"]
    return error


# --- The requests that answered 500 --------------------------------------------------------------

SEARCHES = {  # name -> (body, field at fault)
    "department id past bigint": ({"query": "hotel", "filters": {"department_ids": [9223372036854775808]}},
                                  "filters.department_ids[0]"),
    "corpus id past bigint": ({"query": "hotel", "filters": {"corpus_ids": [2**64]}}, "filters.corpus_ids[0]"),
    "NUL in a metadata key": ({"query": "hotel", "filters": {"metadata": {"a\x00b": "x"}}}, "filters.metadata"),
    "NUL in a metadata value": ({"query": "hotel", "filters": {"metadata": {"a": "x\x00y"}}}, "filters.metadata"),
    "NUL in a metadata list value": ({"query": "hotel", "filters": {"metadata": {"a": ["ok", "x\x00y"]}}}, "filters.metadata"),
    "lone surrogate in a metadata value": ({"query": "hotel", "filters": {"metadata": {"a": "\ud800"}}}, "filters.metadata"),
    "overlong metadata value": ({"query": "hotel", "filters": {"metadata": {"a": "v" * 1001}}}, "filters.metadata"),
}


@pytest.mark.parametrize("name", list(SEARCHES))
def test_hostile_search_filters_are_a_400_naming_the_field(hostile, name):
    """Hostile input: search filters with ids past bigint, NUL or lone surrogates are a 400 naming the field"""
    client, *_ = hostile
    body, field = SEARCHES[name]
    raw = json.dumps(body).encode()  # json.dumps escapes NUL and surrogates as \\u sequences, as a client would
    _assert_400_on(client.generic("POST", "/api/v1/search/", raw, content_type="application/json"), field)


def test_a_body_of_100000_brackets_is_a_400_on_body(hostile):
    """Hostile input: a JSON body of 100,000 `[` is a 400 on `body`, not a RecursionError"""
    client, *_ = hostile
    for url in ("/api/v1/search/", "/api/v1/ask/", "/api/v1/corpora/"):
        error = _assert_400_on(client.generic("POST", url, b"[" * 100_000, content_type="application/json"), "body")
        assert "nested" in error["message"]
    deep_but_parseable = b'{"query": ' + b"[" * 200 + b"]" * 200 + b"}"
    _assert_400_on(client.generic("POST", "/api/v1/search/", deep_but_parseable, content_type="application/json"), "body")


def test_a_search_filter_with_300000_metadata_keys_is_refused_cheaply(hostile, reliability):
    """Hostile input: a search filter with 300,000 metadata keys is refused by its size, cheaply"""
    client, *_ = hostile
    raw = json.dumps({"query": "hotel", "filters": {"metadata": {str(i): 0 for i in range(300_000)}}}).encode()
    started = time.process_time()
    response = client.generic("POST", "/api/v1/search/", raw, content_type="application/json")
    cpu = time.process_time() - started
    error = _assert_400_on(response, "filters.metadata")
    assert "at most 50 keys" in error["message"]
    reliability.figure("CPU seconds for the request (was 4 s)", round(cpu, 2))
    reliability.figure("body bytes", len(raw))
    assert cpu < 1.5, cpu


def test_an_oversized_json_body_is_refused_unread(hostile):
    """Hostile input: a JSON body over 4 MiB is a 400 on `body`"""
    client, *_ = hostile
    raw = b'{"query": "' + b"x" * (4 * 1024 * 1024 + 10) + b'"}'
    _assert_400_on(client.generic("POST", "/api/v1/search/", raw, content_type="application/json"), "body")


def test_a_form_body_with_too_many_fields_is_a_400_on_body(hostile):
    """Hostile input: a form body past Django's field limit is a 400 on `body`, not a 500"""
    client, *_ = hostile
    raw = "&".join(f"departments={i}" for i in range(1500))
    response = client.generic("POST", "/api/v1/keys/", raw, content_type="application/x-www-form-urlencoded")
    assert "more than 1000 fields" in _assert_400_on(response, "body")["message"]


UPLOAD_METADATA = {  # name -> raw metadata form field
    "deeply nested metadata": '{"a":' * 5000 + "1" + "}" * 5000,
    "metadata nested past 8 levels": '{"a":' * 9 + "1" + "}" * 9,
    "NUL in a metadata value": json.dumps({"a": "x\x00y"}),
    "NUL in a metadata key": json.dumps({"a\x00": "y"}),
    "NUL in a nested metadata value": json.dumps({"a": {"b": ["x\x00"]}}),
    "lone surrogate in metadata": '{"a": "\\udc00"}',
    "infinite number in metadata": '{"a": 1e999}',
    "metadata over 64 KiB": json.dumps({"a": "x" * 70_000}),
}


@pytest.mark.parametrize("name", list(UPLOAD_METADATA))
def test_hostile_upload_metadata_is_a_400_on_metadata(hostile, name):
    """Hostile input: upload metadata nested 5,000 deep, with NUL, lone surrogates or infinities is a 400 on `metadata`"""
    client, tenant, scope, corpus = hostile
    files = [SimpleUploadedFile("a.md", b"# Travel\n\nHotels are capped at 150 EUR.")]
    response = client.post("/api/v1/documents/", {"corpus": corpus.id, "metadata": UPLOAD_METADATA[name], "files": files})
    _assert_400_on(response, "metadata")
    with activate(scope):
        assert not Document.objects.for_scope(scope).exists()


@pytest.mark.parametrize(("url", "field"), [
    ("/api/v1/documents/?cursor=cD1hYmM=", "cursor"),  # p=abc
    ("/api/v1/runs/?cursor=cD1hYmM=", "cursor"),
    ("/api/v1/jobs/?cursor=cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk5", "cursor"),  # p=99999999999999999999
    ("/api/v1/corpora/?cursor=cD0tMQ==", "cursor"),  # p=-1
    ("/api/v1/corpora/?cursor=%2Fw%3D%3D", "cursor"),  # not ASCII once decoded
    ("/api/v1/runs/?until=2020-13-45", "until"),
    ("/api/v1/runs/?since=0000-01-01", "since"),
    ("/api/v1/runs/?principal=%00", "principal"),
    ("/api/v1/runs/?strategy=%00", "strategy"),
    ("/api/v1/runs/?q=%00", "q"),
    ("/api/v1/runs/?q=" + "x" * 501, "q"),
])
def test_hostile_query_parameters_are_a_400_naming_the_parameter(hostile, url, field):
    """Hostile input: forged cursors, impossible dates and NUL in run filters are a 400 naming the parameter"""
    client, *_ = hostile
    _assert_400_on(client.get(url), field)


def test_a_key_with_a_department_id_past_bigint_is_a_400(hostile):
    """Hostile input: ids past bigint in a key's departments are a 400 naming the item"""
    client, *_ = hostile
    _assert_400_on(client.post("/api/v1/keys/", {"name": "k", "role": "reader", "departments": [2**63]}, format="json"),
                   "departments[0]")


def test_valid_cursors_still_page(hostile):
    client, tenant, scope, corpus = hostile
    for i in range(3):
        client.post("/api/v1/corpora/", {"name": f"c{i}", "embedding_model": "hash", "embedding_dim": 64}, format="json")
    first = client.get("/api/v1/corpora/?page_size=2").json()
    assert len(first["results"]) == 2 and first["next"]
    second = client.get(first["next"]).json()
    assert len(second["results"]) == 2 and not {c["id"] for c in second["results"]} & {c["id"] for c in first["results"]}


# --- /api/ errors in JSON, DEBUG on ---------------------------------------------------------------

def test_unknown_api_urls_are_a_json_404_with_debug_on(hostile):
    """Fail-safe defaults: unknown /api/ URLs answer the JSON 404 with DEBUG on, not the URL-pattern listing"""
    client, *_ = hostile
    for method, url in (("get", "/api/v1/nothing-here/"), ("get", "/api/"), ("get", "/api/v2/corpora/"), ("post", "/api/v1/search"),
                        ("delete", "/api/v1/corpora/1/nope/")):
        response = getattr(client, method)(url)
        assert response.status_code == 404, url
        assert _error(response)["code"] == "not_found"
        assert b"urlpatterns" not in response.content and b"Using the URLconf" not in response.content
    redirect = client.get("/api/v1/corpora?page_size=1")  # only the slash missing: redirected, as APPEND_SLASH would
    assert redirect.status_code == 301 and redirect["Location"] == "/api/v1/corpora/?page_size=1"
    assert client.get("/nothing-here/").status_code == 404  # outside the API: Django's pages


def test_an_unhandled_error_is_a_bare_json_500_with_debug_on(hostile, monkeypatch):
    """Fail-safe defaults: an unhandled error under /api/ is a JSON 500 without stack, settings or SQL, DEBUG on"""
    client, *_ = hostile
    import kb.retrieval

    def explode(*args, **kwargs):
        raise RuntimeError("SECRET-LOCAL-VARIABLE select * from tenants_apikey")

    monkeypatch.setattr(kb.retrieval, "search", explode)
    # A handler of its own, not caplog: scripts/reliability runs pytest with -p no:logging.
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        response = client.post("/api/v1/search/", {"query": "hotel"}, format="json")
    finally:
        logger.removeHandler(handler)
    assert response.status_code == 500
    assert _error(response) == {"code": "server_error", "message": "internal error", "fields": {}}
    assert b"SECRET" not in response.content and b"Traceback" not in response.content
    logged = [r for r in records if r.exc_info]
    assert len(logged) == 1 and "SECRET-LOCAL-VARIABLE" in str(logged[0].exc_info[1])  # kept for the operator


# --- Admin pages an auditor may not use ----------------------------------------------------------

@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_an_auditor_opening_the_upload_and_chunk_search_pages_gets_403(client):
    """Hostile input: an auditor opening the admin's upload or chunk-search page gets 403, not a 500"""
    tenant = make_tenant("Acme")
    user = make_staff_user("auditor-acme", "x" * 12)
    make_membership(user, tenant, "auditor", all_departments=True)
    client.force_login(user)
    for url in ("/admin/kb/document/upload/", "/admin/kb/chunk/search/"):
        assert client.get(url).status_code == 403, url
        assert client.post(url, {"corpus": 1}).status_code == 403, url


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
def test_hostile_metadata_and_queries_in_the_admin_are_form_errors(client):
    """Hostile input: the admin's upload form and chunk-search preview answer hostile metadata and a NUL
    query with an error on the page, not a 500 (the same rule as the API: kb.metadata)"""
    tenant = make_tenant("Acme")
    with activate(whole_tenant(tenant)):
        corpus = Corpus.objects.create(tenant=tenant, name="Policies", embedding_model="hash", embedding_dim=64)
    user = make_staff_user("editor-acme", "x" * 12)
    make_membership(user, tenant, "editor", all_departments=True)
    client.force_login(user)
    for name, raw in UPLOAD_METADATA.items():
        files = [SimpleUploadedFile("a.md", b"# Travel\n\nHotels are capped at 150 EUR.")]
        response = client.post("/admin/kb/document/upload/", {"corpus": corpus.id, "metadata": raw, "files": files})
        assert response.status_code == 200 and "metadata" in response.context["form"].errors, name
    with activate(whole_tenant(tenant)):
        assert not Document.objects.for_scope(whole_tenant(tenant)).exists()
    response = client.get("/admin/kb/chunk/search/", {"q": "hotel\x00limit"})  # refused at the edge (api/nul_bytes.py)
    assert response.status_code == 400 and "q: must not contain NUL characters" in response.content.decode()


# --- Settings: the embedded run with DEBUG off ---------------------------------------------------

def _settings_value(env: dict[str, str], expr: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DEBUG", "SECRET_KEY", "SECRET_KEY_FILE"}}
    code = f"import django; from django.conf import settings; django.setup(); print({expr})"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**base, "DJANGO_SETTINGS_MODULE": "api.project.settings", **env},
                          capture_output=True, text=True, timeout=120)


def test_debug_off_takes_a_generated_key_from_secret_key_file(tmp_path):
    """Fail-safe defaults: with DEBUG off the embedded run generates its key once into SECRET_KEY_FILE (0600)"""
    key_file = tmp_path / "data" / "pg.secret_key"
    env = {"DEBUG": "0", "SECRET_KEY_FILE": str(key_file)}
    first = _settings_value(env, "settings.SECRET_KEY, settings.DEBUG")
    assert first.returncode == 0, first.stderr
    second = _settings_value(env, "settings.SECRET_KEY, settings.DEBUG")
    assert first.stdout == second.stdout and "False" in first.stdout
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text().strip()
    assert len(key) >= 50 and key in first.stdout and "insecure" not in first.stdout
    key_file.write_text("short\n")
    bad = _settings_value(env, "settings.SECRET_KEY")
    assert bad.returncode != 0 and "SECRET_KEY_FILE" in bad.stderr


def test_scripts_run_serves_with_debug_off_unless_asked():
    """Fail-safe defaults: scripts/run exports DEBUG=0 and a SECRET_KEY_FILE unless run with --debug"""
    script = (ROOT / "scripts" / "run").read_text()
    prelude = script[: script.index("source scripts/bootstrap.sh")]
    probe = prelude.replace('cd "$(dirname "$0")/.."', f'cd "{ROOT}"')
    probe += 'echo "DEBUG=$DEBUG KEYFILE=$SECRET_KEY_FILE COOKIES=$SECURE_COOKIES"\n'
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY_FILE", "SECURE_COOKIES", "GROUNDED_DATA_DIR"}}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", probe, "scripts/run", *args], env=env, capture_output=True, text=True, timeout=30)

    assert run().stdout.strip() == "DEBUG=0 KEYFILE=.data/pg.secret_key COOKIES=0"
    assert run("--debug").stdout.strip().startswith("DEBUG=1 ")
    assert run("--bogus").returncode == 2


# --- Parsing limits -------------------------------------------------------------------------------

def docx_bomb(unpacked_mb: int = 60) -> bytes:
    """A valid DOCX whose document.xml is `unpacked_mb` MB of empty paragraphs (60 MB: 123 KB packed, 682:1)."""
    base = make_docx(lambda d: d.add_paragraph("Hotels are capped at 150 EUR per night."))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for item in src.infolist():
            body = src.read(item.filename)
            if item.filename == "word/document.xml":
                head, _, rest = body.partition(b"<w:body>")
                body = head + b"<w:body>" + b"<w:p/>" * (unpacked_mb * 1024 * 1024 // 6) + rest
            dst.writestr(item.filename, body)
    return out.getvalue()


# Parses the bomb in a fresh interpreter and prints its time and the peak growth of its memory: the highest RSS
# the process had (VmHWM) less its RSS just before parsing. An upper bound on what parsing added (a higher peak
# while importing would count against it), where RSS after minus before misses every allocation freed by the time
# parsing ends. (Not ru_maxrss: Linux carries it across exec, so it starts at the forking test process's RSS.)
_PARSE_AND_MEASURE = """
import json, sys, time
from kb.parsing import ParseLimitExceeded, ParseLimits, parse

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))

bomb, limits = open(sys.argv[1], "rb").read(), ParseLimits(**json.loads(sys.argv[2]))
before, started = kib("VmRSS"), time.monotonic()
try:
    parse(bomb, "bomb.docx", limits=limits)
    error = None
except ParseLimitExceeded as exc:
    error = str(exc)
seconds = time.monotonic() - started
print(json.dumps({"seconds": seconds, "peak_growth": (kib("VmHWM") - before) * 1024, "error": error}))
"""


def _parse_in_a_fresh_process(path: Path, limits: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", _PARSE_AND_MEASURE, str(path), json.dumps(limits)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


class _PeakRss:
    """The highest RSS of this process while the block runs, sampled every 5 ms by a thread (`growth`: over the start)."""

    def __enter__(self) -> _PeakRss:
        self._process, self._done = psutil.Process(), threading.Event()
        self.before = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.before


def test_a_docx_zip_bomb_fails_fast_in_bounded_memory(reliability, tmp_path):
    """Parsing limits: a 123 KB DOCX unpacking to 60 MB of empty paragraphs fails within 10 s, peak memory under +200 MB"""
    bomb = docx_bomb(60)
    with zipfile.ZipFile(io.BytesIO(bomb)) as zf:
        unpacked = sum(m.file_size for m in zf.infolist())
    assert len(bomb) < 150 * 1024 and unpacked > 60 * 1000 * 1000
    (path := tmp_path / "bomb.docx").write_bytes(bomb)
    results = {}
    for name, limits in (("default limits", {}),
                         # the ratio and size caps lifted: the element count (a streaming pass) must stop it
                         ("only the element cap", {"max_compression_ratio": 1e9, "max_unpacked_bytes": 2**40})):
        found = _parse_in_a_fresh_process(path, limits)
        seconds, grown = found["seconds"], found["peak_growth"] / 2**20
        results[name] = f"{seconds:.2f} s, peak RSS +{grown:.0f} MiB: {found['error']}"
        assert found["error"] is not None, results[name]  # refused (ParseLimitExceeded), not parsed
        assert seconds < 10 and grown < 200, results[name]
    assert "compressed" in results["default limits"] and "markup elements" in results["only the element cap"]
    reliability.figure("packed / unpacked", f"{len(bomb) / 1024:.0f} KiB / {unpacked / 2**20:.0f} MiB")
    reliability.figure("outcomes", results)


def test_a_docx_zip_bomb_upload_fails_its_document_with_a_clear_error(hostile):
    """Parsing limits: the zip bomb uploaded through the API: 202, then the document fails naming the limit"""
    client, tenant, scope, corpus = hostile
    response = client.post("/api/v1/documents/", {"corpus": corpus.id, "files": [SimpleUploadedFile("bomb.docx", docx_bomb(60))]})
    assert response.status_code == 202, response.content[:300]
    job_id = response.json()["jobs"][0]
    assert job_id is not None, response.json()
    started = time.monotonic()
    with _PeakRss() as memory:
        run_ingest_job(job_id=job_id, tenant_id=tenant.id)
    assert time.monotonic() - started < 10 and memory.growth / 2**20 < 200
    with activate(scope):
        doc = Document.objects.for_scope(scope).get(pk=response.json()["documents"][0]["id"])
    assert doc.status == "failed" and "limit" in doc.error and "compressed" in doc.error, doc.error


def test_parsing_limits_on_pages_elements_blocks_characters_and_time():
    """Parsing limits: PDF pages, HTML elements, blocks, characters and parse time each fail with the limit named"""
    pdf = make_pdf([f"Page {i} text." for i in range(5)])
    with pytest.raises(ParseLimitExceeded, match="5 pages"):
        parse(pdf, "p.pdf", limits=ParseLimits(max_pdf_pages=4))
    assert parse(pdf, "p.pdf", limits=ParseLimits(max_pdf_pages=5)).sections
    html = b"<html><body>" + b"<p>x</p>" * 1000 + b"</body></html>"
    with pytest.raises(ParseLimitExceeded, match="markup elements"):
        parse(html, "h.html", limits=ParseLimits(max_html_elements=500))
    text = "\n\n".join(f"Paragraph {i}." for i in range(1000)).encode()
    with pytest.raises(ParseLimitExceeded, match="paragraphs"):
        parse(text, "t.txt", limits=ParseLimits(max_blocks=999))
    with pytest.raises(ParseLimitExceeded, match="characters"):
        parse(text, "t.txt", limits=ParseLimits(max_text_chars=1000))
    with pytest.raises(ParseLimitExceeded, match="longer than"):
        parse(pdf, "p.pdf", limits=ParseLimits(max_seconds=0))
    big = docx_bomb(2)  # 2 MB of paragraphs: over a 1 MB total, and over 100:1
    with pytest.raises(ParseLimitExceeded, match="unpacks to"):
        parse(big, "b.docx", limits=ParseLimits(max_unpacked_bytes=1024 * 1024))
    assert issubclass(ParseLimitExceeded, ParseError)
