"""The access matrix: every write the product offers, tried by every kind of actor, each outcome judged
by an oracle written from the rule itself ("a caller can narrow, never widen"), not from the code.

The inventory is generated, so a new route or model admin is covered without editing this file:
- API: every route under /api/v1/ in the URL resolver, with every unsafe method its view has;
- admin: every ModelAdmin in the admin registry: add, change and delete of rows of every zone, each of
  its actions over rows of every zone, and every extra URL it serves (exports, upload, search, the
  playground, the tenant switch, a user's password), fetched and posted. Django's users and groups
  included; an admin of an app the matrix does not know fails it (KNOWN_ADMIN_APPS).

Path ids are taken from every zone: rows the actor may change, rows of its tenant outside its reach
(another department, tenant-wide rows), the other tenant's rows. Bodies try to widen: the highest role,
every flag on, every department id (its own, another department's, the other tenant's), other zones'
corpora, users and members. After each request the database is compared with its state before (read
through the owner connection); every changed row must be one the oracle lets this actor change, no
request may answer 500, and no response may carry text of a zone the actor cannot see.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.test import APIClient

from agents.conversations import start_conversation
from agents.services import ask
from kb.models import Source
from tenants.models import ApiKey, Membership, TenantUser
from tenants.scope import Scope, activate
from tests import query_checker
from tests.api.conftest import CANARY, ingest, issue
from tests.factories import make_membership, make_staff_user
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.sources.conftest import grant

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

ROLE_GRANTS = {"admin": {"admin", "editor", "reader", "auditor"}, "editor": {"editor", "reader"}, "reader": {"reader"},
               "auditor": {"auditor"}}
IGNORED_TABLES = {"django_session", "django_admin_log", "django_content_type", "django_migrations", "auth_permission"}
# Apps whose admins the matrix knows how to judge: ours, and Django's users and groups (operators only).
KNOWN_ADMIN_APPS = {"tenants", "kb", "agents", "auth"}
VOLATILE = {"tenants_apikey": {"last_used_at"}, "auth_user": {"last_login"}}
HEAVY = ("embedding", "search_vector", "lexemes", "data")


@dataclass
class Actor:
    name: str
    tenant: str  # "a" or "b"
    role: str
    departments: tuple[str, ...] | None  # None: all departments
    tenant_id: int = 0
    department_ids: frozenset[int] = frozenset()
    forbidden: tuple[str, ...] = ()

    @property
    def all_departments(self) -> bool:
        return self.departments is None

    def reaches(self, department_id: int | None) -> bool:
        """May change a row of this department (None: tenant-wide)."""
        return self.all_departments or (department_id is not None and department_id in self.department_ids)


ACTORS = [Actor("reader", "a", "reader", None), Actor("editor", "a", "editor", None), Actor("auditor", "a", "auditor", None),
          Actor("department admin", "a", "admin", ("Sales",)), Actor("tenant admin", "a", "admin", None),
          Actor("other tenant's admin", "b", "admin", None)]


# --- the world, with a row of every kind in every zone -------------------------------------------------

@dataclass
class Matrix:
    world: object
    actor: Actor
    api: APIClient
    site: Client
    failures: list[str] = field(default_factory=list)
    tried: int = 0


def _build(world, actor: Actor) -> Matrix:
    w, actor = world, dataclasses.replace(actor)
    with activate(Scope.system(w.b.id)):
        b_dept_ids = sorted(w.b.departments.values_list("id", flat=True))
    w.b_dept_ids = b_dept_ids
    ingest(w.b_corpus, "Globex extra", f"Globex parking {CANARY} rules.")
    # Principals and users in every zone.
    user_model = get_user_model()
    for tenant, name, depts in ((w.a, "sales-member", [w.sales]), (w.a, "eng-member", [w.eng]), (w.a, "whole-member", None),
                                (w.b, f"globex-member-{CANARY.lower()}", None)):
        user = user_model.objects.create_user(username=name, email=f"{name}@example.test")
        with activate(Scope.system(tenant.id)):
            TenantUser.objects.create(user=user, tenant=tenant)
        make_membership(user, tenant, "reader", all_departments=depts is None, departments=depts or [])
    w.spare_users = {}  # users of each tenant who are no member yet: one per body, so adding one is never "already a member"
    for tenant in (w.a, w.b):
        spares = w.spare_users[tenant.id] = [user_model.objects.create_user(username=f"spare-{tenant.slug}-{i}") for i in range(60)]
        with activate(Scope.system(tenant.id)):
            TenantUser.objects.bulk_create([TenantUser(user=u, tenant=tenant) for u in spares])
    w.operator = make_staff_user("operator", superuser=True)  # an operator's account, without a home
    w.keys["a-eng-reader"] = issue(w.a, "reader", [w.eng])
    # Sources on every corpus (a folder with one file each), so their routes and admin are tried in every zone.
    for corpus in (w.shared, w.sales_corpus, w.eng_corpus, w.b_corpus):
        with activate(Scope.system(corpus.tenant_id)):
            Source.objects.create(tenant_id=corpus.tenant_id, corpus=corpus, name=f"source of {corpus.name}", kind="folder",
                                  config={"path": w.source_folder}, schedule_minutes=0)
    # Runs in every zone.
    for scope in (Scope(w.a.id, all_departments=True, role="reader", principal="matrix"),
                  Scope(w.a.id, frozenset({w.sales.id}), role="reader", principal="matrix"),
                  Scope(w.a.id, frozenset({w.eng.id}), role="reader", principal="matrix"),
                  Scope(w.b.id, all_departments=True, role="reader", principal="matrix")):
        ask(scope=scope, question="What is the hotel limit per night?", strategy="classic", provider="offline")
    # A conversation in each tenant, owned by a principal no actor is (so none may continue, see or delete it).
    for tenant in (w.a, w.b):
        start_conversation(scope=Scope(tenant.id, all_departments=True, role="reader", principal="matrix"), title="matrix")
    # The actor.
    tenant = w.a if actor.tenant == "a" else w.b
    actor.tenant_id = tenant.id
    actor.department_ids = frozenset({w.sales.id}) if actor.departments == ("Sales",) else frozenset()
    if actor.tenant == "b":
        actor.forbidden = ("150 EUR", "discount ceiling", "rotate weekly", "sales-only", "eng-only")
    else:
        actor.forbidden = (CANARY,) + (("rotate weekly", "eng-only") if not actor.all_departments else ())
    api = APIClient(raise_request_exception=False)
    key_name = {"department admin": "a-sales-admin", "other tenant's admin": "b-admin"}.get(actor.name, f"a-{actor.role}")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {w.keys[key_name]}")
    staff = make_staff_user(f"staff-{actor.role}-{actor.tenant}-{len(actor.department_ids)}", "pw-matrix-12345")
    departments = [w.sales] if actor.departments == ("Sales",) else []
    make_membership(staff, tenant, actor.role, all_departments=actor.all_departments, departments=departments)
    site = Client(raise_request_exception=False)
    site.force_login(staff)
    return Matrix(world=w, actor=actor, api=api, site=site)


# --- the database before and after -------------------------------------------------------------------

@functools.cache
def _tables() -> tuple[str, ...]:
    """The tables compared (the schema does not change within a run)."""
    with connections["owner"].cursor() as cur:
        names = connections["owner"].introspection.table_names(cur)
    kept = (t for t in names if t not in IGNORED_TABLES and t.split("_")[0] in {"tenants", "kb", "agents", "auth"})
    return tuple(sorted(kept))


def _compared_rows(table: str) -> str:
    """SQL: the table's rows as JSON, without the heavy and volatile columns."""
    drop = " ".join(f"- '{c}'" for c in (*HEAVY, *VOLATILE.get(table, ())))
    return f'SELECT to_jsonb(t) {drop} AS row FROM "{table}" t'


# The test's own view of the whole database (as the owner, every tenant): exempt from the tenant query checker.
ORACLE = "test oracle: every tenant's rows read as the owner"
# table -> (fingerprint, its rows by key): a table whose fingerprint is unchanged is not fetched again.
_fetched: dict[str, tuple[str, dict[str, dict]]] = {}


def snapshot() -> dict[tuple[str, str], dict]:
    """Every compared row, keyed by (table, id). One query fingerprints all tables (md5 of their sorted
    rows); only tables whose fingerprint changed since they were last read are fetched row by row."""
    tables = _tables()
    fingerprints = " UNION ALL ".join(
        f"SELECT '{t}', md5(coalesce(string_agg(s.row::text, '|' ORDER BY s.row::text), '')) FROM ({_compared_rows(t)}) s"
        for t in tables)
    with query_checker.allowed(ORACLE), connections["owner"].cursor() as cur:
        cur.execute(fingerprints)
        for table, fingerprint in cur.fetchall():
            if _fetched.get(table, ("",))[0] == fingerprint:
                continue
            cur.execute(_compared_rows(table))
            rows = {}
            for (raw,) in cur.fetchall():
                row = json.loads(raw) if isinstance(raw, str) else raw
                rows[str(row.get("id", row.get("user_id", json.dumps(row, sort_keys=True))))] = row
            _fetched[table] = (fingerprint, rows)
    return {(table, key): row for table in tables for key, row in _fetched[table][1].items()}


def _user_tenants(user_id: int, *states: dict) -> set[int]:
    out = set()
    for state in states:
        for (table, _), row in state.items():
            if table in ("tenants_tenantuser", "tenants_membership") and row.get("user_id") == user_id:
                out.add(row["tenant_id"])
    return out


def _row_tenant(table: str, row: dict, before: dict, after: dict) -> int | None:
    if table == "tenants_tenant":
        return row["id"]
    if "tenant_id" in row:
        return row["tenant_id"]
    for parent in ("apikey", "membership"):
        if f"{parent}_id" in row:
            key = (f"tenants_{parent}", str(row[f"{parent}_id"]))
            owner = after.get(key) or before.get(key)
            return owner["tenant_id"] if owner else None
    return None


def _principal_departments(table: str, pk: int, state: dict) -> set[int]:
    through, owner = f"{table}_departments", table.removeprefix("tenants_") + "_id"
    return {row["department_id"] for (t, _), row in state.items() if t == through and row[owner] == pk}


def _department(table: str, row: dict, before: dict, after: dict) -> int | None:
    """The department a knowledge-base row belongs to: its own column, else its chunk's, document's or corpus's."""
    if "department_id" in row:
        return row["department_id"]
    for column, parent in (("chunk_id", "kb_chunk"), ("document_id", "kb_document"), ("corpus_id", "kb_corpus"),
                           ("source_id", "kb_source"), ("sync_id", "kb_sourcesync")):
        if row.get(column) is not None:
            found = after.get((parent, str(row[column]))) or before.get((parent, str(row[column])))
            if found is not None:
                return _department(parent, found, before, after)
    return None


def judge(actor: Actor, table: str, old: dict | None, new: dict | None, before: dict, after: dict) -> str | None:
    """Why this change of `table` breaks the rule for `actor`, or None when the rule allows it."""
    row = new or old
    if table == "auth_user":
        if new is not None and (new["is_staff"] or new["is_superuser"]) and (old is None or old["is_staff"] != new["is_staff"]
                                                                            or old["is_superuser"] != new["is_superuser"]):
            return "a user's privilege flags were set"
        tenants = _user_tenants(row["id"], before, after)
        if tenants != {actor.tenant_id}:
            return f"a user of tenants {sorted(tenants)} (none: no tenant) was changed"
        return None if actor.role == "admin" else f"a {actor.role} changed a user"
    if table.startswith("auth_"):
        return f"{table} changed: Django's groups and permissions are for operators only"
    tenant = _row_tenant(table, row, before, after)
    if tenant != actor.tenant_id:
        return f"a row of tenant {tenant} changed"
    if table.startswith("agents_"):
        if old is not None:
            return "a trace row was changed or deleted"
        if table == "agents_run":
            scope = new["scope"]
            if scope["all_departments"] and not actor.all_departments:
                return "a run was made with all departments"
            if not actor.all_departments and not set(scope["department_ids"]) <= actor.department_ids:
                return f"a run was made in departments {scope['department_ids']}"
            if actor.role == "auditor":
                return "an auditor made a run"
        return None
    if actor.role not in ("admin", "editor"):
        return f"a {actor.role} changed {table}"
    editor_tables = {"kb_document", "kb_chunk", "kb_chunksentence", "kb_documentcontent", "kb_ingestjob", "kb_embeddingcache"}
    if actor.role == "editor" and table not in editor_tables and not (table == "kb_corpus" and old and new
                                                                      and {k for k in new if new[k] != old[k]} <= {"chunk_count"}):
        return f"an editor changed {table}"
    if table == "tenants_tenant":
        return None if actor.all_departments else "a department-limited admin changed the tenant's settings"
    if table == "tenants_department":
        return None if actor.all_departments else "a department-limited admin changed departments"
    if table == "tenants_membership" and new is not None and (old is None or old["user_id"] != new["user_id"]):
        home = after.get(("tenants_tenantuser", str(new["user_id"]))) or before.get(("tenants_tenantuser", str(new["user_id"])))
        if home is None or home["tenant_id"] != actor.tenant_id:
            return (f"a membership was made for a user whose home is "
                    f"{'tenant ' + str(home['tenant_id']) if home else 'no tenant'}")
    if table in ("tenants_apikey", "tenants_membership"):
        for version, version_state in ((old, before), (new, after)):
            if version is None:
                continue
            departments = _principal_departments(table, version["id"], version_state)
            if version["role"] not in ROLE_GRANTS[actor.role]:
                return f"{table} with role {version['role']} touched"
            if version["all_departments"] and not actor.all_departments:
                return f"{table} with all departments touched"
            if not actor.all_departments and not departments <= actor.department_ids:
                return f"{table} with departments {sorted(departments)} touched"
        return None
    if table in ("tenants_apikey_departments", "tenants_membership_departments"):
        return None if actor.reaches(row["department_id"]) else f"{table} linked to department {row['department_id']}"
    if table == "tenants_tenantuser":
        return None
    if table in ("kb_corpus", "kb_document", "kb_chunk", "kb_chunksentence", "kb_documentcontent", "kb_ingestjob"):
        for version in (old, new):
            department = _department(table, version, before, after) if version is not None else None
            if version is not None and not actor.reaches(department):
                return f"{table} of department {department} changed"
        return None
    if table == "kb_embeddingcache":
        return None
    if table in ("kb_source", "kb_sourcesync", "kb_sourceitem", "kb_sourcechange"):  # managed like corpora: admins only
        if actor.role != "admin":
            return f"a {actor.role} changed {table}"
        for version in (old, new):
            department = _department(table, version, before, after) if version is not None else None
            if version is not None and not actor.reaches(department):
                return f"{table} of department {department} changed"
        if table == "kb_source" and new is not None:
            for rule in new.get("department_rules") or []:
                if not actor.reaches(rule.get("department")):
                    return f"a source rule maps into department {rule.get('department')}"
        return None
    return f"{table}: a change this oracle does not know (teach it the rule for the new table)"


# --- requests ----------------------------------------------------------------------------------------------

def _text(response) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")


def send(m: Matrix, what: str, call) -> None:
    before = snapshot()
    response = call()
    body = _text(response)
    after = snapshot()
    m.tried += 1
    if response.status_code >= 500:
        m.failures.append(f"{what}: {response.status_code}")
    if response.status_code == 429 and "daily" not in body:
        m.failures.append(f"{what}: throttled, so not tested (raise the matrix's rate limit)")
    for needle in m.actor.forbidden:
        if needle.casefold() in body.casefold():
            m.failures.append(f"{what}: the response carries {needle!r}")
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old != new:
            reason = judge(m.actor, key[0], old, new, before, after)
            if reason:
                m.failures.append(f"{what}: {reason} ({key[0]} {key[1]})")


def zone_ids(table: str) -> list[int]:
    """One id per zone of `table`: per tenant and department (or all-departments flag), so every kind of
    row is tried: the actor's own, its tenant's out of its reach, the other tenant's."""
    with query_checker.allowed(ORACLE), connections["owner"].cursor() as cur:
        cur.execute(f'SELECT to_jsonb(t) FROM "{table}" t ORDER BY id')
        rows = [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in cur.fetchall()]
    if table in ("tenants_apikey", "tenants_membership"):
        return [row["id"] for row in rows]  # a principal's zone is also its department set: try them all
    if table == "auth_user":
        return user_zones()
    seen: dict[tuple, int] = {}
    for row in rows:
        zone = (row.get("tenant_id", row.get("id") if table == "tenants_tenant" else None), row.get("department_id"),
                row.get("all_departments"), row.get("role"), row.get("corpus_id") if table == "kb_source" else None)
        seen.setdefault(zone, row["id"])
    return sorted(seen.values())


def user_zones() -> list[int]:
    """One user per zone: home tenant (none for operators' accounts) and privilege flags."""
    with query_checker.allowed(ORACLE), connections["owner"].cursor() as cur:
        cur.execute("SELECT u.id, h.tenant_id, u.is_staff, u.is_superuser FROM auth_user u "
                    "LEFT JOIN tenants_tenantuser h ON h.user_id = u.id ORDER BY u.id")
        seen: dict[tuple, int] = {}
        for pk, *zone in cur.fetchall():
            seen.setdefault(tuple(zone), pk)
    return sorted(seen.values())


def principal_zones(table: str) -> list[int]:
    """One key or membership per zone: tenant, role, all-departments flag and department set."""
    owner = table.removeprefix("tenants_") + "_id"
    with query_checker.allowed(ORACLE), connections["owner"].cursor() as cur:
        cur.execute(f'SELECT p.id, p.tenant_id, p.role, p.all_departments, '
                    f'ARRAY(SELECT department_id FROM "{table}_departments" d WHERE d.{owner} = p.id ORDER BY 1) '
                    f'FROM "{table}" p ORDER BY p.id')
        seen: dict[tuple, int] = {}
        for pk, *zone in cur.fetchall():
            seen.setdefault(tuple(map(str, zone)), pk)
    return sorted(seen.values())


def _wide_values(m: Matrix) -> list[dict]:
    """Bodies for every write: a plausible one inside the actor's reach, then one per way to widen it
    (each changes one thing, so the rest of the body is valid and the widening is what gets judged)."""
    w, actor = m.world, m.actor
    own_tenant, other_tenant = (w.a, w.b) if actor.tenant == "a" else (w.b, w.a)
    own_dept = w.sales.id if actor.tenant == "a" else w.b_dept_ids[0]
    other_dept = w.eng.id if actor.tenant == "a" else w.b_dept_ids[1]
    foreign_dept = w.b_dept_ids[0] if actor.tenant == "a" else w.sales.id
    corpora = zone_ids("kb_corpus")
    own_corpus = w.sales_corpus.id if actor.tenant == "a" else w.b_corpus.id
    users = zone_ids("auth_user")
    base = {"name": "matrix", "description": "matrix", "role": "reader", "all_departments": False, "departments": [own_dept],
            "department": own_dept, "corpus": own_corpus, "username": "matrix-user", "email": "matrix@example.test",
            "question": "What is the hotel limit?", "strategy": "classic", "query": "hotel limit", "title": "Matrix",
            "metadata": {"category": "matrix"}, "embedding_model": "hash", "embedding_dim": 64, "chunk_target_tokens": 200,
            "chunk_overlap_tokens": 20, "tenant": own_tenant.id, "settings": {}, "kind": "folder",
            "config": {"path": w.source_folder}, "schedule_minutes": 0,
            # Django's user forms (add, change, password), so a page that let the actor in would be a valid write.
            "password1": "matrix-pw-24680", "password2": "matrix-pw-24680", "usable_password": "true",
            "date_joined_0": "2024-01-02", "date_joined_1": "03:04:05", "is_active": True}
    widen = [{"all_departments": True}, {"departments": [own_dept, other_dept]}, {"departments": [foreign_dept]},
             {"role": "admin"}, {"department": other_dept}, {"department": foreign_dept}, {"department": None},
             {"tenant": other_tenant.id}, {"settings": {"daily_runs": 1}},
             *({"department_rules": [{"prefix": "", "department": d}]} for d in (other_dept, foreign_dept, None))]
    widen += [{"corpus": c} for c in corpora]
    widen += [{"user": u} for u in users]
    widen += [{"act_as": f"member:{i}"} for i in principal_zones("tenants_membership")]
    widen += [{"act_as": f"key:{i}"} for i in principal_zones("tenants_apikey")]
    widen += [{"filters": {"department_ids": [other_dept, foreign_dept]}}, {"filters": {"corpus_ids": corpora}},
              {"filters": {"document_ids": zone_ids("kb_document")}}]
    # Names differ per body, so a refusal is never just "already exists".
    # `_change` names what the body widens: a PATCH sends only that (a partial update of one thing).
    spares = w.spare_users[own_tenant.id]
    return [{**base, "name": f"matrix-{i}", "username": f"matrix-user-{i}", "user": spares[i % len(spares)].id, **change,
             "_change": sorted(change)} for i, change in enumerate([{}, *widen])]


def _body(values: dict, method: str) -> dict:
    if method == "delete":
        return {}
    if method == "patch":
        return {k: values[k] for k in values["_change"]} or {"description": "matrix"}
    return {k: v for k, v in values.items() if k != "_change"}


def _form(values: dict) -> dict:
    out = {}
    for k, v in _body(values, "post").items():
        if isinstance(v, bool):
            if v:
                out[k] = "on"
        elif isinstance(v, dict):
            out[k] = json.dumps(v)
        elif v is not None:
            out[k] = v
    out["files"] = SimpleUploadedFile("matrix.md", b"# Matrix\n\nA matrix probe document.\n")
    return out


API_MODEL = {"corpus_id": "kb_corpus", "document_id": "kb_document", "job_id": "kb_ingestjob", "run_id": "agents_run",
             "key_id": "tenants_apikey", "member_id": "tenants_membership", "source_id": "kb_source",
             "conversation_id": "agents_conversation"}


def api_routes() -> list[tuple[str, URLPattern]]:
    out = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif (prefix + str(p.pattern)).startswith("api/v1/"):
                out.append((prefix + str(p.pattern), p))

    walk(get_resolver().url_patterns, "")
    return out


def _fill(route: str, ids: dict[str, int]) -> str:
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda g: str(ids[g.group(1)]), route)


_SCHEMA: dict = {}


def _api_fields(route: str, method: str) -> set[str]:
    """The request fields of `method` on `route`, from the OpenAPI schema the API publishes."""
    if not _SCHEMA:
        from drf_spectacular.generators import SchemaGenerator

        _SCHEMA.update(SchemaGenerator().get_schema(request=None, public=True))
    path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
    operation = _SCHEMA["paths"].get(path, {}).get(method, {})
    fields: set[str] = set()
    for content in operation.get("requestBody", {}).get("content", {}).values():
        schema = content["schema"]
        if "$ref" in schema:
            schema = _SCHEMA["components"]["schemas"][schema["$ref"].split("/")[-1]]
        fields |= set(schema.get("properties", {}))
    return fields


def _api_requests(m: Matrix):
    """Every API write (deletes last, so they do not remove what the others try to reach)."""
    requests = list(_api_writes(m))
    return [r for r in requests if " DELETE " not in r[0]] + [r for r in requests if " DELETE " in r[0]]


def _api_writes(m: Matrix):
    for route, pattern in api_routes():
        view = getattr(pattern.callback, "view_class", None) or getattr(pattern.callback, "cls", None)
        params = re.findall(r"<(?:\w+:)?(\w+)>", route)
        unknown = [p for p in params if p not in API_MODEL]
        assert not unknown, f"{route}: teach the matrix which table {unknown} names"
        id_sets = [{}] if not params else [{params[0]: i} for i in zone_ids(API_MODEL[params[0]])]
        parsers = list(getattr(view, "parser_classes", []))
        multipart = any(issubclass(p, MultiPartParser) for p in parsers) and not any(issubclass(p, JSONParser) for p in parsers)
        for method in ("post", "put", "patch", "delete"):
            if view is None or not hasattr(view, method):
                continue
            fields = _api_fields(route, method)
            variants = _wide_values(m)
            variants = [variants[0]] + [v for v in variants[1:] if set(v["_change"]) & fields]
            for ids in id_sets:
                url = _fill(route, ids)
                for values in variants:
                    send_it = getattr(m.api, method)
                    yield f"API {method.upper()} {url}", (functools.partial(send_it, url, _form(values)) if multipart
                                                          else functools.partial(send_it, url, _body(values, method), format="json"))
            yield f"API GET {route}", functools.partial(m.api.get, _fill(route, id_sets[0]))


STANDARD_ADMIN_VIEWS = ("changelist", "add", "history", "delete", "change")


def _admin_requests(m: Matrix):
    """Every admin request (deletions last, so they do not remove what the others try to reach)."""
    requests = list(_admin_writes(m))

    def destructive(what: str) -> bool:
        return "/delete/" in what or " delete" in what

    return [r for r in requests if not destructive(r[0])] + [r for r in requests if destructive(r[0])]


def _form_fields(response) -> set[str]:
    """The fields of the form(s) an admin page renders (none for a refused page)."""
    fields: set[str] = set()
    for context in response.context or []:
        for name in ("adminform", "form"):
            form = context.get(name) if hasattr(context, "get") else None
            form = getattr(form, "form", form)
            fields |= set(getattr(form, "fields", {}) or {})
    return fields


def _variants_for(m: Matrix, url: str) -> list[dict]:
    """The widening bodies that touch a field of the page's form (all of them with the plausible base)."""
    fields = _form_fields(m.site.get(url))
    variants = _wide_values(m)
    return [variants[0]] + [v for v in variants[1:] if set(v["_change"]) & fields]


def _admin_writes(m: Matrix):
    unknown = sorted(f"{m._meta.app_label}.{m.__name__}" for m in admin.site._registry if m._meta.app_label not in KNOWN_ADMIN_APPS)
    assert not unknown, f"admins of apps the matrix does not know: {unknown} (teach it, and the oracle, their rules)"
    for model, model_admin in admin.site._registry.items():
        table, info = model._meta.db_table, (model._meta.app_label, model._meta.model_name)
        base = f"/admin/{info[0]}/{info[1]}/"
        ids = zone_ids(table)
        yield f"admin GET {base}", functools.partial(m.site.get, base)
        yield f"admin GET {base}add/", functools.partial(m.site.get, f"{base}add/")
        for values in _variants_for(m, f"{base}add/"):
            yield f"admin POST {base}add/", functools.partial(m.site.post, f"{base}add/", _form(values))
        for pk in ids:
            yield f"admin GET {base}{pk}/change/", functools.partial(m.site.get, f"{base}{pk}/change/")
            for values in _variants_for(m, f"{base}{pk}/change/"):
                yield f"admin POST {base}{pk}/change/", functools.partial(m.site.post, f"{base}{pk}/change/", _form(values))
            yield f"admin GET {base}{pk}/delete/", functools.partial(m.site.get, f"{base}{pk}/delete/")
            yield f"admin POST {base}{pk}/delete/", functools.partial(m.site.post, f"{base}{pk}/delete/", {"post": "yes"})
        for action, *_ in model_admin._get_base_actions() or []:
            for extra in ({}, {"apply": "1", "embedding_model": "hash", "embedding_dim": 64}):
                body = {"action": action, "_selected_action": ids, "index": 0, "post": "yes", **extra}
                yield f"admin action {base} {action}", functools.partial(m.site.post, base, body)
        for pattern in model_admin.get_urls():
            name = getattr(pattern, "name", "") or ""
            standard = name in {f"{info[0]}_{info[1]}_{v}" for v in STANDARD_ADMIN_VIEWS} or name.endswith("autocomplete")
            if not isinstance(pattern, URLPattern) or standard:
                continue
            route = str(pattern.pattern)
            params = re.findall(r"<(?:\w+:)?(\w+)>", route)
            fills = ([{}] if not params else [{"slug": s} for s in (m.world.a.slug, m.world.b.slug)] if params == ["slug"]
                     else [{params[0]: i} for i in ids] if params in (["object_id"], ["id"]) else None)
            assert fills is not None, f"{base}{route}: teach the matrix what {params} takes"
            for fill in fills:
                url = base + re.sub(r"<(?:\w+:)?(\w+)>", lambda g, f=fill: str(f[g.group(1)]), route)
                yield f"admin GET {url}", functools.partial(m.site.get, url, {"q": "hotel limit"})
                for values in _variants_for(m, url):
                    yield f"admin POST {url}", functools.partial(m.site.post, url, _form(values))


@pytest.fixture(autouse=True)
def _no_rate_limit(settings):
    settings.RATE_LIMIT_PER_MINUTE = 1_000_000


@pytest.fixture(autouse=True)
def _source_folder(settings, tmp_path, world):
    """A folder sources may read (one small file), for the sources' routes and admin."""
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "probe.md").write_text("# Probe\n\nA folder source probe document.\n")
    settings.SOURCES_FOLDER_ROOTS = [str(tmp_path)]
    grant(world.a, "folder", str(tmp_path))  # an operator's grant (manage.py grant_source)
    world.source_folder = str(tmp_path / "share")


@pytest.mark.parametrize("edge", ["api", "admin"])
@pytest.mark.parametrize("actor", ACTORS, ids=[a.name for a in ACTORS])
def test_writes_never_widen(world, actor, edge):
    """Every write of the edge (API routes, or the admin registry), by `actor`, judged row by row."""
    m = _build(world, actor)
    for what, call in (_api_requests if edge == "api" else _admin_requests)(m):
        send(m, what, call)
    assert m.tried > 50
    assert not m.failures, f"{len(m.failures)} of {m.tried} requests broke the rule:\n" + "\n".join(dict.fromkeys(m.failures))


def test_the_oracle_catches_a_widening_grant(world):
    """The oracle is not vacuous: a department admin's all-departments key, written behind the checks'
    back, and a change to another tenant's row are both reported."""
    actor = _build(world, ACTORS[3]).actor
    before = snapshot()
    with activate(Scope.system(world.a.id)):
        ApiKey.issue(tenant=world.a, name="sneaky", role="admin", all_departments=True)
    with activate(Scope.system(world.b.id)):
        Membership.objects.filter(tenant=world.b).update(role="admin")
    after = snapshot()
    reasons = [judge(actor, k[0], before.get(k), after.get(k), before, after) for k in before.keys() | after.keys()
               if before.get(k) != after.get(k)]
    assert any(r and "all departments" in r for r in reasons) and any(r and "row of tenant" in r for r in reasons), reasons


def test_the_oracle_catches_a_membership_of_a_user_from_elsewhere(world):
    """The membership rule is not vacuous: a membership of tenant A made for tenant B's user, one made for
    an operator's account (no home), and one of A's re-pointed to B's user, written behind the checks'
    back, are each reported for tenant A's admin."""
    m = _build(world, ACTORS[4])
    user_model = get_user_model()
    globex_user = user_model.objects.get(username=f"globex-member-{CANARY.lower()}")
    globex_spare = m.world.spare_users[world.b.id][0]
    with activate(Scope.system(world.a.id)):
        repointed = Membership.objects.get(tenant=world.a, user__username="eng-member")
    before = snapshot()
    with activate(Scope.system(world.a.id)):
        Membership.objects.create(tenant=world.a, user=globex_user, role="reader", all_departments=True)
        Membership.objects.create(tenant=world.a, user=m.world.operator, role="reader", all_departments=True)
        Membership.objects.filter(pk=repointed.pk).update(user=globex_spare)
    after = snapshot()
    reasons = {k: judge(m.actor, k[0], before.get(k), after.get(k), before, after) for k in before.keys() | after.keys()
               if before.get(k) != after.get(k) and k[0] == "tenants_membership"}
    assert len(reasons) == 3, reasons
    assert reasons[("tenants_membership", str(repointed.pk))] == f"a membership was made for a user whose home is tenant {world.b.id}"
    assert sorted(reasons.values()) == sorted([f"a membership was made for a user whose home is tenant {world.b.id}"] * 2
                                              + ["a membership was made for a user whose home is no tenant"]), reasons
