"""Cross-tenant and cross-department canary suite.

Routes come from the URL configuration, tools from the agent tool registry and tasks from the
Celery registry, so a new endpoint, tool or task without a probe fails this suite. Each is called
as tenant A (whole tenant, and with Sales-only keys) with tenant B's ids (and A-Engineering's, for
the Sales keys) and with crafted filters. Pass: not found or empty, never a 5xx, and no canary of
the other side in any response body, SSE event, stored trace, log line or admin page; the other
side's rows are byte-for-byte unchanged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from agents import tasks as _agents_tasks  # noqa: F401  (registers agents.write_chain_digests, probed below)
from agents.budgets import Budgets
from agents.messages import ToolCall
from agents.tools import TOOLS, ToolDeps, run_tool
from api.project.celery import app as celery_app
from kb import tasks as _registered_tasks  # noqa: F401  (registers the Celery tasks: since issue 30 kb.ingest no longer imports them)
from kb.models import Corpus, Document
from tenants.scope import Scope, ScopeRequired, activate
from tests.factories import make_membership, make_staff_user
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.logs import every_log_record
from tests.reliability.world import B_QUESTION, E_QUESTION, CanaryWorld, Side, leaks, run_ids_of, snapshot, trace_text

pytestmark = pytest.mark.django_db(databases=["default", "owner"])

PRINCIPALS = ("a-admin", "a-sales-admin", "a-sales-reader")
# Keys and members are filtered by department like everything else (tenants.access.visible_api_keys/visible_memberships,
# also used by the admin's key/member pages and the ask playground), so no route or admin page is exempt any more.
TENANT_WIDE_ROUTES: frozenset[str] = frozenset()
TENANT_WIDE_ADMIN: tuple[str, ...] = ()
ROLE_DENIED = "your role does not allow this"


@dataclass
class Req:
    method: str
    url: str
    data: dict | None = None
    fmt: str = "json"
    what: str = ""
    expect_404: bool = False  # an id of the other side in the path
    foreign_ids: dict[str, set[int]] = field(default_factory=dict)  # result field -> ids that must not come back


# --- Route enumeration ----------------------------------------------------------------------------

def all_routes() -> Iterator[tuple[str, str, URLPattern]]:
    """(route pattern, namespaced name, pattern) for every URL the project serves."""

    def walk(patterns, prefix: str, ns: str):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern), ns + (f"{p.namespace}:" if p.namespace else ""))
            else:
                yield prefix + str(p.pattern), ns + (p.name or ""), p

    yield from walk(get_resolver().url_patterns, "/", "")


def view_methods(pattern: URLPattern) -> list[str]:
    view = getattr(pattern.callback, "view_class", None) or getattr(pattern.callback, "cls", None)
    if view is None:
        return ["get"]
    return [m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)]


# --- API probes: route name -> method -> requests built from the other side's ids -------------------

def _ids(side: Side, attr: str) -> list[int]:
    return getattr(side, attr) or [999_999]


def _path_probe(path: str, attr: str, body: dict | None = None) -> Callable[[CanaryWorld, Side, str], list[Req]]:
    def build(w: CanaryWorld, side: Side, method: str) -> list[Req]:
        return [Req(method, path.format(id=i), body, what=f"{attr} {i}", expect_404=True) for i in _ids(side, attr)]
    return build


def _search_bodies(side: Side, question: str) -> list[dict]:
    filters = [{}, {"corpus_ids": side.corpus_ids}, {"document_ids": side.document_ids}, {"department_ids": side.department_ids},
               {"metadata": {"category": "globex-confidential"}}, {"metadata": {"category": "engineering-confidential"}},
               {"corpus_ids": side.corpus_ids, "department_ids": side.department_ids, "document_ids": side.document_ids}]
    return [{"query": question, "k": 50, "mode": mode, "filters": f} for f in filters for mode in ("hybrid", "keyword", "vector")]


def _question(side: Side, w: CanaryWorld) -> str:
    return E_QUESTION if side is w.e_side else B_QUESTION


def probe_search(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    return [Req("post", "/api/v1/search/", body, what=f"search {body['mode']} {sorted(body['filters'])}",
                foreign_ids={"chunk_id": set(side.chunk_ids), "document_id": set(side.document_ids)})
            for body in _search_bodies(side, _question(side, w))]


def probe_ask(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    q = _question(side, w)
    return [Req("post", "/api/v1/ask/", {"question": q, "strategy": s}, what=f"ask {s}") for s in ("classic", "agentic", "pipeline")] + \
        [Req("post", "/api/v1/ask/", {"question": f"{q} Search corpus {side.corpus_ids[0]} and document {side.document_ids[0]}, "
                                                  f"department {side.department_ids[0]}; read chunk {side.chunk_ids[0]}."},
             what="ask naming foreign ids")]


def probe_ask_stream(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    return [Req("post", "/api/v1/ask/stream/", {"question": _question(side, w), "strategy": s}, what=f"stream {s}")
            for s in ("classic", "agentic")]


def probe_list(path: str, attr: str, params: Callable[[Side], list[dict]]) -> Callable[[CanaryWorld, Side, str], list[Req]]:
    """GET a collection (with foreign ids as filters); none of the other side's `attr` ids may come back."""
    def build(w: CanaryWorld, side: Side, method: str) -> list[Req]:
        return [Req("get", path + ("?" + "&".join(f"{k}={v}" for k, v in p.items()) if p else ""), what=f"list {p}",
                    foreign_ids={"id": set(getattr(side, attr))}) for p in params(side)]
    return build


def probe_corpus_create(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    return [Req("post", "/api/v1/corpora/", {"name": f"probe {d}", "department": d}, what=f"create corpus in department {d}")
            for d in side.department_ids]


def probe_upload(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return [Req("post", "/api/v1/documents/", {"corpus": c, "files": [SimpleUploadedFile("probe.md", b"# Probe\n\nhello")]},
                fmt="multipart", what=f"upload into corpus {c}") for c in side.corpus_ids]


def probe_key_create(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    return [Req("post", "/api/v1/keys/", {"name": "probe", "role": "admin", "departments": [d]}, what=f"key for department {d}")
            for d in side.department_ids]


def probe_member_create(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    users = get_user_model().objects.filter(pk__in=side.user_ids).values_list("username", flat=True)
    return [Req("post", "/api/v1/members/", {"username": u, "role": "admin", "departments": side.department_ids}, what="add foreign member")
            for u in users] + [Req("post", "/api/v1/members/", {"username": "probe-user", "role": "reader", "departments": [d]},
                                   what=f"member in department {d}") for d in side.department_ids]


def probe_source_create(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    base = {"kind": "s3", "config": {"bucket": "probe"}, "schedule_minutes": 0}
    return [Req("post", "/api/v1/sources/", {**base, "name": f"probe {c}", "corpus": c}, what=f"source on corpus {c}")
            for c in side.corpus_ids] + \
        [Req("post", "/api/v1/sources/", {**base, "name": f"probe rule {d}", "corpus": w.a_own.corpus_ids[0],
                                           "department_rules": [{"prefix": "", "department": d}]}, what=f"rule into department {d}")
         for d in side.department_ids]


def probe_source_items(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    """Foreign sources' items, and (for the department side) the items of A's own tenant-wide source,
    some of which map into Engineering."""
    own = [Req("get", f"/api/v1/sources/{w.a_own.source_ids[0]}/items/", what="own tenant-wide source's items")] \
        if side is w.e_side else []
    return _path_probe("/api/v1/sources/{id}/items/", "source_ids")(w, side, method) + own


def probe_static(path: str) -> Callable[[CanaryWorld, Side, str], list[Req]]:
    return lambda w, side, method: [Req(method, path, what="no ids")]


def probe_mcp(w: CanaryWorld, side: Side, method: str) -> list[Req]:
    """MCP tool calls at /mcp (api/mcp_http.py) aimed at the other side: its corpora, chunks and question.
    Chunk ids inside MCP's text results are not parsed: the canary-text check covers what comes back."""
    q = _question(side, w)
    calls = [("list_corpora", {}), ("search", {"query": q, "k": 20, "corpus_ids": side.corpus_ids}),
             *(("read", {"chunk_id": c, "neighbours": 3}) for c in side.chunk_ids[:3]), ("ask", {"question": q})]
    return [Req("post", "/mcp", {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": n, "arguments": a}},
                what=f"mcp {n}", foreign_ids={"chunk_id": set(side.chunk_ids)}) for i, (n, a) in enumerate(calls)]


API_PROBES: dict[str, dict[str, Callable[[CanaryWorld, Side, str], list[Req]]]] = {
    "healthz": {"get": probe_static("/healthz")},
    "mcp": {"post": probe_mcp},
    "schema": {"get": probe_static("/api/v1/schema/")},
    "docs": {"get": probe_static("/api/v1/docs/")},
    "api-not-found": {"get": probe_static("/api/v1/no-such-endpoint/")},
    "corpus-list": {"get": probe_list("/api/v1/corpora/", "corpus_ids", lambda s: [{}]), "post": probe_corpus_create},
    "corpus-detail": {"get": _path_probe("/api/v1/corpora/{id}/", "corpus_ids"),
                      "patch": _path_probe("/api/v1/corpora/{id}/", "corpus_ids", {"description": "probe"}),
                      "delete": _path_probe("/api/v1/corpora/{id}/", "corpus_ids")},
    "corpus-reembed": {"post": _path_probe("/api/v1/corpora/{id}/reembed/", "corpus_ids",
                                           {"embedding_model": "hash", "embedding_dim": 16})},
    # A corpus file names no tenant: the import lands in the caller's (tests/kb/test_corpus_export.py imports real files).
    "corpus-export": {"get": _path_probe("/api/v1/corpora/{id}/export/", "corpus_ids")},
    "corpus-import": {"post": probe_static("/api/v1/corpora/import/")},
    "document-list": {"get": probe_list("/api/v1/documents/", "document_ids", lambda s: [{}, *({"corpus": c} for c in s.corpus_ids)]),
                      "post": probe_upload},
    "document-detail": {"get": _path_probe("/api/v1/documents/{id}/", "document_ids"),
                        "delete": _path_probe("/api/v1/documents/{id}/", "document_ids")},
    "document-reingest": {"post": _path_probe("/api/v1/documents/{id}/reingest/", "document_ids")},
    "document-file": {"get": _path_probe("/api/v1/documents/{id}/file/", "document_ids")},
    "job-list": {"get": probe_list("/api/v1/jobs/", "job_ids", lambda s: [{}, *({"document": d} for d in s.document_ids)])},
    "job-detail": {"get": _path_probe("/api/v1/jobs/{id}/", "job_ids")},
    "search": {"post": probe_search},
    "ask": {"post": probe_ask},
    "ask-stream": {"post": probe_ask_stream},
    "run-list": {"get": probe_list("/api/v1/runs/", "run_ids", lambda s: [{}, {"principal": "key:eng"}, {"outcome": "answered"}])},
    "run-chain-verify": {"get": probe_static("/api/v1/runs/verify/")},
    "run-detail": {"get": _path_probe("/api/v1/runs/{id}/", "run_ids")},
    "department-list": {"get": probe_list("/api/v1/departments/", "department_ids", lambda s: [{}])},
    "key-list": {"get": probe_list("/api/v1/keys/", "key_ids", lambda s: [{}]), "post": probe_key_create},
    "key-detail": {"get": _path_probe("/api/v1/keys/{id}/", "key_ids"), "delete": _path_probe("/api/v1/keys/{id}/", "key_ids")},
    "member-list": {"get": probe_list("/api/v1/members/", "member_ids", lambda s: [{}]), "post": probe_member_create},
    "source-list": {"get": probe_list("/api/v1/sources/", "source_ids", lambda s: [{}, *({"corpus": c} for c in s.corpus_ids)]),
                    "post": probe_source_create},
    "source-detail": {"get": _path_probe("/api/v1/sources/{id}/", "source_ids"),
                      "patch": _path_probe("/api/v1/sources/{id}/", "source_ids", {"paused": True, "schedule_minutes": 1}),
                      "delete": _path_probe("/api/v1/sources/{id}/", "source_ids")},
    "source-sync": {"post": _path_probe("/api/v1/sources/{id}/sync/", "source_ids")},
    "source-sync-list": {"get": _path_probe("/api/v1/sources/{id}/syncs/", "source_ids")},
    "source-item-list": {"get": probe_source_items},
    "chat": {"get": probe_static("/")},
    "login": {"get": probe_static("/login/"), "post": probe_static("/login/"), "put": probe_static("/login/")},
    "logout": {"get": probe_static("/logout/"), "post": probe_static("/logout/")},
    # Onboarding (api/onboarding.py): a token is the whole credential and names no id of either side.
    "accept_invite": {"get": probe_static("/invite/not-a-token/")},
    "password_reset": {m: probe_static("/password-reset/") for m in ("get", "post", "put")},
    "password_reset_done": {"get": probe_static("/password-reset/sent/")},
    "password_reset_confirm": {m: probe_static("/password-reset/MQ/not-a-token/") for m in ("get", "post", "put")},
    "admin_password_reset": {m: probe_static("/admin/password-reset/") for m in ("get", "post", "put")},
    # Single sign-on (api/oidc.py; 404 unless configured): the provider's code and state name no id of ours.
    "oidc_authentication_init": {"get": probe_static("/oidc/authenticate/")},
    "oidc_authentication_callback": {"get": probe_static("/oidc/callback/?code=probe&state=probe")},
    "conversation-list": {"get": probe_list("/api/v1/conversations/", "conversation_ids", lambda s: [{}]),
                          "post": probe_static("/api/v1/conversations/")},
    "conversation-detail": {"get": _path_probe("/api/v1/conversations/{id}/", "conversation_ids"),
                            "patch": _path_probe("/api/v1/conversations/{id}/", "conversation_ids", {"title": "probe"}),
                            "delete": _path_probe("/api/v1/conversations/{id}/", "conversation_ids")},
    "conversation-messages": {"post": _path_probe("/api/v1/conversations/{id}/messages/", "conversation_ids", {"message": "and then?"})},
    "conversation-messages-stream": {"post": _path_probe("/api/v1/conversations/{id}/messages/stream/", "conversation_ids",
                                                         {"message": "and then?"})},
    "run-feedback": {"post": _path_probe("/api/v1/runs/{id}/feedback/", "run_ids", {"rating": "up", "comment": "probe"})},
    "feedback-list": {"get": probe_list("/api/v1/feedback/", "feedback_ids", lambda s: [{}, {"rating": "down"}])},
    "member-detail": {"get": _path_probe("/api/v1/members/{id}/", "member_ids"),
                      "patch": _path_probe("/api/v1/members/{id}/", "member_ids", {"role": "admin"}),
                      "delete": _path_probe("/api/v1/members/{id}/", "member_ids")},
}


def api_routes() -> list[tuple[str, str, URLPattern]]:
    return [(route, name, p) for route, name, p in all_routes() if not name.startswith("admin:")]


def body_text(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode("utf-8", "replace")
    return response.content.decode("utf-8", "replace")


def returned_ids(payload, key: str) -> set[int]:
    """Every value of `key` anywhere in a JSON payload."""
    found: set[int] = set()
    if isinstance(payload, dict):
        for k, v in payload.items():
            if k == key and isinstance(v, int):
                found.add(v)
            found |= returned_ids(v, key)
    elif isinstance(payload, list):
        for v in payload:
            found |= returned_ids(v, key)
    return found


def listed_ids(payload) -> set[int]:
    """The `id` of each record a collection lists (a list, or a page's `results`): nested objects
    (a source's `last_sync`, a run's steps) carry ids of other tables, which may equal a foreign one."""
    records = payload.get("results", []) if isinstance(payload, dict) else payload if isinstance(payload, list) else []
    return {r["id"] for r in records if isinstance(r, dict) and isinstance(r.get("id"), int)}


def e_snapshot(w: CanaryWorld) -> str:
    """A's Engineering rows (corpus, document, chunks, job, key, membership, conversation)."""
    from tests.reliability.world import _rows

    s, parts = w.e_side, []
    for table, column, ids in (("kb_corpus", "id", s.corpus_ids), ("kb_document", "id", s.document_ids),
                               ("kb_chunk", "document_id", s.document_ids), ("kb_ingestjob", "id", s.job_ids),
                               ("tenants_apikey", "id", s.key_ids), ("tenants_membership", "id", s.member_ids),
                               ("kb_source", "id", s.source_ids), ("kb_sourceitem", "source_id", s.source_ids),
                               ("agents_conversation", "id", s.conversation_ids)):
        rows = _rows(f"SELECT t::text FROM {table} t WHERE {column} = ANY(%s) ORDER BY 1", [ids], w.a.id)
        assert rows, f"no {table} rows of A-Engineering visible"
        parts += rows
    return "\n".join(parts)


@pytest.fixture
def captured_logs():
    """Every log record of every logger, formatted with its arguments as it is emitted, while the probes run."""
    records: list[str] = []
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")

    def collect(record: logging.LogRecord) -> None:
        try:
            records.append(formatter.format(record))
        except Exception as exc:  # a record that cannot be formatted is itself worth seeing
            records.append(f"unformattable record {record.msg!r}: {exc}")

    with every_log_record(collect):
        yield records


@pytest.fixture
def inline_streams(monkeypatch):
    """Run the SSE worker inline: the test database transaction is only visible to this connection."""
    from api.views import agents as agent_views

    monkeypatch.setattr(agent_views, "start_background", lambda target: target())


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    settings.RATE_LIMIT_REDIS_URL = ""
    settings.RATE_LIMIT_PER_MINUTE = 100_000
    cache.clear()


def test_every_route_has_a_probe():
    """Route inventory: every URL in the URL configuration has a cross-tenant probe"""
    missing = []
    for route, name, pattern in api_routes():
        for method in view_methods(pattern):
            if method not in API_PROBES.get(name, {}):
                missing.append(f"{method.upper()} {route} ({name})")
    assert not missing, "routes without a cross-tenant probe (add them to API_PROBES): " + ", ".join(missing)
    stale = set(API_PROBES) - {name for _, name, _ in api_routes()}
    assert not stale, f"probes for routes that no longer exist: {stale}"


def test_api_routes_answer_not_found_and_leak_nothing(canary_world, captured_logs, inline_streams, reliability, settings):
    """Cross-tenant and cross-department: every API route with foreign ids and crafted filters"""
    settings.DEBUG = False
    w = canary_world
    before_b, before_e = snapshot(w.b.id), e_snapshot(w)
    a_runs_before = run_ids_of(w.a.id)
    failures: list[str] = []
    statuses: dict[int, int] = {}
    n = 0
    for who in PRINCIPALS:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {w.keys[who]}")
        for side in w.foreign(who):
            for _route, name, pattern in api_routes():
                if side is w.e_side and name in TENANT_WIDE_ROUTES:
                    continue
                for method in view_methods(pattern):
                    for req in API_PROBES[name][method](w, side, method):
                        n += 1
                        kwargs = {"format": req.fmt} if req.data is not None else {}
                        response = getattr(client, req.method)(req.url, req.data, **kwargs) if req.data is not None else \
                            getattr(client, req.method)(req.url)
                        text = body_text(response)
                        code = response.status_code
                        statuses[code] = statuses.get(code, 0) + 1
                        label = f"{who} {req.method.upper()} {req.url} [{req.what}] -> {code}"
                        if code >= 500:
                            failures.append(f"{label}: server error")
                        forbidden = tuple(p for p in w.forbidden(who) if not (name in TENANT_WIDE_ROUTES and p == "CNRYE"))
                        if found := leaks(text, forbidden):
                            failures.append(f"{label}: canary in response: {found[:2]}")
                        if req.expect_404 and code not in (404, 403):
                            failures.append(f"{label}: expected 404 for another tenant's/department's id")
                        if code == 403 and ROLE_DENIED not in text:
                            failures.append(f"{label}: 403 that is not the role check reveals the object exists")
                        if req.foreign_ids and code == 200 and not getattr(response, "streaming", False):
                            payload = json.loads(text or "null")
                            for key, ids in req.foreign_ids.items():
                                if back := (listed_ids(payload) if key == "id" else returned_ids(payload, key)) & ids:
                                    failures.append(f"{label}: returned foreign {key}s {sorted(back)}")
    new_runs = run_ids_of(w.a.id) - a_runs_before
    stored = trace_text(w.a.id, new_runs)
    # Runs by whole-tenant keys may see A-Engineering; B's canaries must be in none of them.
    if found := leaks(stored, ("CNRYB", "CNRYK")):
        failures.append(f"canary of B in A's stored traces: {found[:2]}")
    if found := leaks("\n".join(captured_logs), ("CNRYB", "CNRYK")):
        failures.append(f"canary of B in log lines: {found[:2]}")
    if snapshot(w.b.id) != before_b:
        failures.append("tenant B's rows changed")
    if e_snapshot(w) != before_e:
        failures.append("A-Engineering's rows changed through a Sales-only key")
    reliability.tried(n, "requests")
    reliability.tried(len(api_routes()), "routes")
    reliability.tried(len(new_runs), "agent runs traced")
    reliability.tried(len(captured_logs), "log records scanned")
    reliability.figure("statuses", dict(sorted(statuses.items())))
    assert not failures, f"{len(failures)} of {n} probes failed:\n" + "\n".join(failures[:40])


def test_department_admin_cannot_reach_other_departments_keys_and_members(canary_world):
    """Cross-department: a Sales-only admin cannot list, read, revoke or edit Engineering's keys and members"""
    w = canary_world
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {w.keys['a-sales-admin']}")
    before = e_snapshot(w)
    listed = body_text(client.get("/api/v1/keys/")) + body_text(client.get("/api/v1/members/"))
    codes = [client.get(f"/api/v1/keys/{w.e_side.key_ids[0]}/").status_code,
             client.get(f"/api/v1/members/{w.e_side.member_ids[0]}/").status_code,
             client.patch(f"/api/v1/members/{w.e_side.member_ids[0]}/", {"role": "admin"}, format="json").status_code,
             client.delete(f"/api/v1/keys/{w.e_side.key_ids[0]}/").status_code]
    assert not leaks(listed, ("CNRYE",))
    assert codes == [404, 404, 404, 404]
    assert e_snapshot(w) == before


def test_sales_key_runs_leave_no_engineering_canary_in_traces(canary_world, inline_streams, reliability):
    """Cross-department: runs of a Sales-only key store nothing of Engineering in their trace"""
    w = canary_world
    before = run_ids_of(w.a.id)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {w.keys['a-sales-reader']}")
    texts = []
    for strategy in ("classic", "agentic", "pipeline"):
        for q in (E_QUESTION, f"{E_QUESTION} Search department {w.a_eng.id} and corpus {w.e_side.corpus_ids[0]}."):
            texts.append(body_text(client.post("/api/v1/ask/", {"question": q, "strategy": strategy}, format="json")))
            texts.append(body_text(client.post("/api/v1/ask/stream/", {"question": q, "strategy": strategy}, format="json")))
    new = run_ids_of(w.a.id) - before
    stored = trace_text(w.a.id, new)
    reliability.tried(len(texts), "asks (JSON and SSE)")
    reliability.tried(len(new), "runs traced")
    assert len(new) == len(texts)
    assert not leaks("\n".join(texts), ("CNRYE", "CNRYB"))
    assert not leaks(stored, ("CNRYE", "CNRYB"))


# --- Agent tools ----------------------------------------------------------------------------------

def titles_of(side: Side) -> list[str]:
    """The titles of the side's documents (read as its own tenant): summarise_document takes a title too."""
    scope = Scope.system(side.tenant_id)
    with activate(scope):
        return list(Document.objects.for_scope(scope).filter(pk__in=side.document_ids).values_list("title", flat=True))


def tool_probes(side: Side, question: str) -> dict[str, list[dict]]:
    d, c, doc, ch = side.department_ids, side.corpus_ids, side.document_ids, side.chunk_ids
    return {
        "search": [{"query": question, "k": 50, "mode": m, **f} for m in ("hybrid", "keyword", "vector") for f in (
            {}, {"corpus_ids": c}, {"document_ids": doc}, {"department_ids": d}, {"department_ids": []},
            {"metadata": {"category": "globex-confidential"}}, {"metadata": {"category": "engineering-confidential"}},
            {"corpus_ids": [f"c:{c[0]}"]}, {"document_ids": [str(doc[0])]})],
        "read": [{"chunk_id": x, "neighbours": 3} for x in ch] + [{"document_id": x} for x in doc] +
                [{"document_id": x, "section": "Details"} for x in doc] + [{"document_id": x, "page": 1} for x in doc] +
                [{"chunk_id": f"c:{ch[0]}"}],
        "search_pages": [{"query": question, "k": 50, **f} for f in (
            {}, {"corpus_ids": c}, {"document_ids": doc}, {"corpus_ids": [f"c:{c[0]}"]}, {"document_ids": [str(doc[0])]})],
        "summarise_document": [{"document_id": x} for x in doc] + [{"document_id": str(doc[0])}] +
                              [{"title": t} for t in titles_of(side)],
        "list_corpora": [{}],
        "facets": [{}, {"corpus_ids": c}],
        "check_grounding": [{"draft": f"The limit is high [c:{x}]."} for x in ch],
    }


def test_every_tool_with_foreign_ids_returns_nothing_of_theirs(canary_world, captured_logs, reliability):
    """Cross-tenant and cross-department: every agent tool with foreign ids"""
    w = canary_world
    missing = sorted(set(TOOLS) - set(tool_probes(w.b_side, B_QUESTION)))
    assert not missing, f"tools without a cross-tenant probe: {missing}"
    scopes = {
        "a-admin": Scope(tenant_id=w.a.id, all_departments=True, role="admin", principal="probe"),
        "a-sales-reader": Scope(tenant_id=w.a.id, department_ids=frozenset({w.a_sales.id}), role="reader", principal="probe"),
    }
    failures, n = [], 0
    for who, scope in scopes.items():
        for side in w.foreign(who):
            foreign_chunks = set(side.chunk_ids)
            for name, arg_sets in tool_probes(side, E_QUESTION if side is w.e_side else B_QUESTION).items():
                for args in arg_sets:
                    n += 1
                    deps = ToolDeps(scope=scope, budgets=Budgets(max_k=50))
                    outcome = run_tool(deps, ToolCall(id="probe", name=name, arguments=args))
                    text = json.dumps(outcome.content, default=str)
                    label = f"{who} {name}({args})"
                    if found := leaks(text, w.forbidden(who)):
                        failures.append(f"{label}: canary {found[:1]}")
                    if back := (set(outcome.chunk_ids) | set(deps.retrieved)) & foreign_chunks:
                        failures.append(f"{label}: foreign chunks {sorted(back)} retrieved")
                    if name == "check_grounding" and '"verified"' in text and "not_retrieved" not in text:
                        failures.append(f"{label}: a foreign chunk was accepted as a citation: {text[:200]}")
    if found := leaks("\n".join(captured_logs), ("CNRYB", "CNRYK")):
        failures.append(f"canary of B in log lines: {found[:2]}")
    reliability.tried(n, "tool calls")
    reliability.tried(len(TOOLS), "tools")
    assert not failures, "\n".join(failures[:40])


# --- Celery tasks ---------------------------------------------------------------------------------

def project_tasks() -> list[str]:
    return sorted(name for name in celery_app.tasks if not name.startswith("celery."))


def task_probes(w: CanaryWorld) -> dict[str, list[tuple]]:
    """Task name -> argument tuples a confused or malicious caller could send: B's ids with A's tenant id."""
    b = w.b_side
    return {
        "kb.ingest_document": [(j, w.a.id) for j in b.job_ids] + [(j, w.a.id) for j in w.e_side.job_ids] + [(10**9, w.a.id)],
        "kb.reembed_corpus": [(j, w.a.id) for j in b.job_ids] + [(10**9, w.a.id)],
        "kb.reap_stuck_jobs": [(600,)],
        "kb.sync_source": [(i, w.a.id) for i in b.source_sync_ids] + [(i, w.a.id) for i in w.e_side.source_sync_ids]
        + [(10**9, w.a.id)],
        "kb.schedule_source_syncs": [()],  # across tenants by design; every planted source is on demand only
        "agents.write_chain_digests": [()],  # across tenants by design: files named by tenant id, no row changed
    }


def test_every_celery_task_with_foreign_ids_touches_nothing_of_theirs(canary_world, captured_logs, reliability, settings,
                                                                     tmp_path):
    """Cross-tenant: every Celery task called with tenant A's id and B's job ids"""
    settings.CHAIN_DIGEST_DIR = str(tmp_path / "digests")  # the digest task writes here, not beside the data
    w = canary_world
    probes = task_probes(w)
    missing = sorted(set(project_tasks()) - set(probes))
    assert not missing, f"Celery tasks without a cross-tenant probe: {missing}"
    before_b = snapshot(w.b.id)
    failures, n = [], 0
    for name, arg_sets in probes.items():
        task = celery_app.tasks[name]
        for args in arg_sets:
            n += 1
            result = task.apply(args=args)
            text = f"{result.state} {result.result!r}"
            if found := leaks(text, ("CNRYB",)):
                failures.append(f"{name}{args}: canary in result {found[:1]}")
            across_tenants = name in ("kb.reap_stuck_jobs", "kb.schedule_source_syncs", "agents.write_chain_digests")
            if not across_tenants and result.result not in ("skipped", "busy", None) and result.state == "SUCCESS":
                failures.append(f"{name}{args}: worked on another tenant's job: {result.result!r}")
    if snapshot(w.b.id) != before_b:
        failures.append("tenant B's rows changed")
    if found := leaks("\n".join(captured_logs), ("CNRYB", "CNRYK")):
        failures.append(f"canary of B in log lines: {found[:2]}")
    reliability.tried(n, "task calls")
    reliability.tried(len(probes), "tasks")
    assert not failures, "\n".join(failures)


# --- Admin ----------------------------------------------------------------------------------------

ADMIN_MODEL_IDS = {  # admin URL name prefix -> the Side attribute holding that model's ids
    "kb_corpus": "corpus_ids", "kb_document": "document_ids", "kb_chunk": "chunk_ids", "kb_ingestjob": "job_ids",
    "agents_run": "run_ids", "agents_feedback": "feedback_ids", "tenants_apikey": "key_ids", "tenants_membership": "member_ids",
    "auth_user": "user_ids",
    "tenants_department": "department_ids", "tenants_tenant": "tenant_id", "auth_group": "group_ids",
    "kb_source": "source_ids",
}
ADMIN_QUERIES = ["", "?q={canary_word}", "?corpus={corpus}&document={document}&run={run}", "?corpus__id__exact={corpus}",
                 "?department={department}&tenant={tenant}"]


def admin_urls(w: CanaryWorld, side: Side) -> list[tuple[str, str]]:
    """(route, URL) for every admin route, path arguments filled with the other side's ids."""
    out, missing = [], []
    for route, name, pattern in all_routes():
        if not name.startswith("admin:"):
            continue
        params = list(pattern.pattern.regex.groupindex)
        short = name.removeprefix("admin:")
        parts = route.strip("/").split("/")
        model_key = f"{parts[1]}_{parts[2]}" if len(parts) >= 3 and not parts[1].startswith("(") else None
        if short == "app_list":
            out += [(route, f"/admin/{app}/") for app in ("kb", "agents", "tenants", "auth")]
        elif not params:
            out.append((route, "/" + route.lstrip("/").replace("^", "").replace("$", "")))
        elif short == "view_on_site":
            out.append((route, f"/admin/r/1/{side.corpus_ids[0]}/"))
        elif params == ["url"]:  # the catch-all
            out += [(route, f"/admin/kb/document/{i}/extra") for i in side.document_ids[:1]]
        elif model_key in ADMIN_MODEL_IDS and len(params) == 1:
            attr = ADMIN_MODEL_IDS[model_key]
            ids = [side.tenant_id] if attr == "tenant_id" else (getattr(side, attr, None) or [999_999])
            token = f"<path:{params[0]}>" if f"<path:{params[0]}>" in route else f"<{params[0]}>"
            out += [(route, route.replace(token, str(i))) for i in ids[:2]]
        else:
            missing.append(f"{route} ({name or 'unnamed'}) {params}")
    assert not missing, f"admin routes without a probe: {missing}"
    return out


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])  # staff users come through the owner connection
@pytest.mark.parametrize("who,departments", [("admin", None), ("sales-admin", "Sales")])
def test_admin_pages_with_foreign_ids_leak_nothing(canary_world, captured_logs, reliability, who, departments):
    """Cross-tenant and cross-department: every admin page with foreign ids"""
    w = canary_world
    user = make_staff_user(f"acme-{who}", "pw-probe-123")
    make_membership(user, w.a, "admin", all_departments=departments is None, departments=[w.a_sales] if departments else ())
    from django.test import Client

    client = Client()
    client.force_login(user)
    before_b, before_e = snapshot(w.b.id), e_snapshot(w)
    failures, n, statuses, add_crashes = [], 0, {}, []
    for side in w.foreign("a-sales-admin" if departments else "a-admin"):
        subs = {"canary_word": "Globex", "corpus": side.corpus_ids[0], "document": side.document_ids[0],
                "department": side.department_ids[0], "run": (side.run_ids or [1])[0], "tenant": side.tenant_id}
        for name, url in admin_urls(w, side):
            if name == "logout":
                continue
            tenant_wide = url.startswith(TENANT_WIDE_ADMIN)
            if tenant_wide and side is w.e_side:
                continue
            prefixes = tuple(p for p in w.forbidden("a-sales-admin" if departments else "a-admin") if not (tenant_wide and p == "CNRYE"))
            queries = ADMIN_QUERIES if url.count("/") <= 4 and not url.endswith(("/add/", "/logout/")) else [""]
            for q in queries:
                n += 1
                target = url + q.format(**subs)
                response = client.get(target)
                text = body_text(response)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                label = f"{who} GET {target} -> {response.status_code}"
                if response.status_code >= 500:
                    failures.append(f"{label}: server error")
                if found := leaks(text, prefixes):
                    failures.append(f"{label}: canary {found[:1]}")
            if "/change/" in url or "/delete/" in url or url.endswith("/add/"):
                n += 1
                # Foreign foreign keys in every field a form might take: the scoped choices must refuse them.
                try:
                    response = client.post(url, {"post": "yes", "name": f"probe {n}", "description": "probe", "tenant": side.tenant_id,
                                                 "department": side.department_ids[0], "departments": side.department_ids,
                                                 "corpus": side.corpus_ids[0], "user": (side.user_ids or [1])[0], "role": "admin"})
                except ScopeRequired:  # Django's unique checks through the raising manager (fixed: a 500 again)
                    add_crashes.append(url)
                    failures.append(f"{who} POST {url}: ScopeRequired")
                    continue
                if response.status_code >= 500 or leaks(body_text(response), prefixes):
                    failures.append(f"{who} POST {url} -> {response.status_code}")
    if snapshot(w.b.id) != before_b:
        failures.append("tenant B's rows changed through the admin")
    if e_snapshot(w) != before_e:
        failures.append("A-Engineering's rows changed through a Sales-only admin")
    if found := leaks("\n".join(captured_logs), ("CNRYB", "CNRYK")):
        failures.append(f"canary of B in log lines: {found[:2]}")
    reliability.tried(n, "admin requests")
    reliability.figure("add forms crashing with ScopeRequired", sorted(set(add_crashes)))
    reliability.figure(f"statuses ({who})", dict(sorted(statuses.items())))
    assert not failures, "\n".join(failures[:40])


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])  # staff users come through the owner connection
def test_admin_can_add_a_corpus(canary_world):
    """Admin: a tenant admin adds a corpus through the admin form (no foreign ids involved)"""
    w = canary_world
    user = make_staff_user("acme-plain-admin", "pw-probe-123")
    make_membership(user, w.a, "admin", all_departments=True)
    from django.test import Client

    client = Client()
    client.force_login(user)
    form = {"name": "Added in the admin", "description": "", "chunk_target_tokens": 200, "chunk_overlap_tokens": 30,
            "embedding_model": "hash", "embedding_dim": 64}
    scope = Scope.system(w.a.id)

    def added() -> int:
        with activate(scope):
            return Corpus.objects.for_scope(scope).filter(name="Added in the admin").count()

    response = client.post("/admin/kb/corpus/add/", form)
    assert response.status_code == 302, body_text(response)[:2000]
    assert added() == 1
    again = client.post("/admin/kb/corpus/add/", form)  # same name in the same tenant: a form error, not a 500
    assert again.status_code == 200 and b"already exists" in again.content
    assert added() == 1


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])  # staff users come through the owner connection
def test_admin_duplicate_department_name_is_a_form_error(canary_world):
    """Admin: adding a department whose name exists in the tenant is a form error, not a 500"""
    w = canary_world
    user = make_staff_user("acme-dept-admin", "pw-probe-123")
    make_membership(user, w.a, "admin", all_departments=True)
    from django.test import Client

    client = Client()
    client.force_login(user)
    response = client.post("/admin/tenants/department/add/", {"name": "Sales"})
    assert response.status_code == 200 and b"already exists" in response.content
