"""Hostile admin query parameters (issue 47, finding 6): every list filter, search box and ordering
parameter of every ModelAdmin in the admin registry, with NUL and other hostile values, by a tenant
admin and by an operator, never answers 5xx.

The inventory is generated like the access matrix's (tests/api/test_access_matrix.py): each model
admin's changelist is fetched as the actor, and the parameters tried are the ones its filters really
read (`spec.expected_parameters()`: `field__exact`, `field__id__exact`, `__isnull`, a SimpleListFilter's
own name, date ranges ...), `q` where it has search fields, and `o`. A new admin or filter is covered
without editing this file. NUL anywhere in a query is a 400 naming the parameter (api/nul_bytes.py).
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
from django.contrib import admin
from django.test import Client

from tests.api.test_admin import staff
from tests.factories import make_staff_user
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

# Raw (already percent-encoded) query values: NUL in its spellings, overlong, non-numeric, past bigint,
# a lone surrogate and an overlong UTF-8 NUL (both invalid UTF-8, decoded by Django to U+FFFD).
HOSTILE_VALUES = ("%00", "a%00b", "%00%00%00" * 50, "x" * 5000, "not-a-number", "9223372036854775808", "-1",
                  "%ED%A0%80", "%C0%80", "2026-13-45")
ORDERINGS = ("%00", "x", "999", "-1.-2.abc", "1." * 500)
# The nine URLs of the report (all answered 500, DataError).
REPORTED = ("/admin/agents/run/?outcome=%00", "/admin/agents/run/?strategy=%00", "/admin/agents/feedback/?rating=%00",
            "/admin/kb/document/?status=%00", "/admin/kb/ingestjob/?status=%00", "/admin/kb/ingestjob/?kind=%00",
            "/admin/kb/source/?kind=%00", "/admin/tenants/apikey/?role=%00", "/admin/tenants/membership/?role=%00")


def _changelists(site: Client):
    """(changelist URL, the parameters its filters read, whether it has a search box) of every registered admin
    the actor can open."""
    for model in admin.site._registry:
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        page = site.get(url)
        assert page.status_code < 500, (url, page.status_code)
        cl = page.context and page.context.get("cl")
        if page.status_code != 200 or cl is None:
            continue
        params = sorted({p for spec in cl.filter_specs for p in spec.expected_parameters()})
        yield url, params, bool(cl.search_fields)


def _sweep(site: Client) -> tuple[int, list[str], set[str]]:
    """Every hostile query of every changelist; (requests made, the ones that answered 5xx, parameters tried)."""
    tried, failures, names = 0, [], set()
    for url, params, searchable in _changelists(site):
        queries = [f"{p}={v}" for p in params for v in HOSTILE_VALUES]
        queries += [f"{p}__nosuchlookup=1" for p in params[:1]] + ["nosuchfield__exact=1", "%00=1", "e=%00", "p=%00", "p=999999"]
        queries += [f"o={v}" for v in ORDERINGS]
        if searchable:
            queries += [f"q={v}" for v in HOSTILE_VALUES] + [f"q=hotel&{params[0]}=%00" if params else "q=%00hotel"]
        names |= {f"{url}?{p}" for p in params} | ({f"{url}?q"} if searchable else set())
        for query in queries:
            response = site.get(f"{url}?{query}")
            tried += 1
            if response.status_code >= 500:
                failures.append(f"{response.status_code} GET {url}?{query[:80]}")
    return tried, failures, names


def _reported_filters_are_rejected(site: Client) -> None:
    for url in REPORTED:
        response = site.get(url)
        name = url.rsplit("?", 1)[1].split("=")[0]
        assert response.status_code == 400, (url, response.status_code)
        assert f"{name}: must not contain NUL characters" in response.content.decode()


def test_hostile_list_filters_search_and_ordering_as_a_tenant_admin(world):
    site = Client(raise_request_exception=False)
    site.force_login(staff(world, "admin"))
    tried, failures, names = _sweep(site)
    assert not failures, f"{len(failures)} of {tried} hostile admin queries answered 5xx:\n" + "\n".join(failures[:40])
    _reported_filters_are_rejected(site)
    # The generated inventory reaches the reported filters (so it would have found them).
    assert {"/admin/agents/run/?outcome__exact", "/admin/kb/document/?status__exact", "/admin/kb/document/?q"} <= names, names
    assert tried > 300


def test_hostile_list_filters_search_and_ordering_as_an_operator(world):
    site = Client(raise_request_exception=False)
    site.force_login(make_staff_user("operator", superuser=True))
    tried, failures, names = _sweep(site)
    assert not failures, f"{len(failures)} of {tried} hostile admin queries answered 5xx:\n" + "\n".join(failures[:40])
    _reported_filters_are_rejected(site)
    assert {"/admin/tenants/membership/?role__exact", "/admin/kb/ingestjob/?kind__exact"} <= names, names
    assert tried > 300


def test_nul_in_a_query_or_form_is_a_400_naming_the_parameter(world, client):
    """Outside the admin too: the chat sign-in form, the API's query parameters (JSON error shape), the path."""
    login = client.post("/login/", urlencode({"username": "a\x00b", "password": "x"}), content_type="application/x-www-form-urlencoded")
    assert login.status_code == 400 and "username: must not contain NUL characters" in login.content.decode()
    api = Client(HTTP_AUTHORIZATION=f"Bearer {world.keys['a-auditor']}")
    response = api.get(f"/api/v1/runs/?outcome={quote(chr(0))}")
    assert response.status_code == 400 and response.json()["error"]["fields"] == {"outcome": ["must not contain NUL characters"]}
    assert client.get("/admin/kb/document/%00/change/").status_code == 400


def _string_properties(schema: dict, components: dict) -> dict[str, str]:
    """The string properties of a request body's schema (one level, $refs resolved): name -> a value holding NUL."""
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[1]]
    return {name: "a\x00b" for name, prop in (schema.get("properties") or {}).items()
            if prop.get("type") == "string" and not prop.get("readOnly")}


def test_nul_in_every_json_string_field_of_the_api_is_a_4xx(world):
    """JSON bodies reach no view with NUL unchecked: every operation of the OpenAPI schema with a JSON body, every
    string field of it holding NUL (the rest as a plausible client sends it), as a tenant admin key: a 4xx, never a 5xx."""
    api = Client(HTTP_AUTHORIZATION=f"Bearer {world.keys['a-admin']}", raise_request_exception=False)
    spec = api.get("/api/v1/schema/?format=json").json()
    components = spec["components"]["schemas"]
    conversation = api.post("/api/v1/conversations/", {"title": "nul"}, content_type="application/json").json()["id"]
    run = api.post("/api/v1/ask/", {"question": "What is the hotel limit?"}, content_type="application/json").json()["id"]
    ids = {"corpus_id": world.shared.id, "conversation_id": conversation, "run_id": run}
    tried, failures = 0, []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            body = (operation.get("requestBody") or {}).get("content", {}).get("application/json")
            params = [p.strip("{}") for p in path.split("/") if p.startswith("{")]
            if method not in ("post", "put", "patch") or body is None or any(p not in ids for p in params):
                continue
            for field in _string_properties(body["schema"], components):
                url = path.format(**ids)
                response = getattr(api, method)(url, {field: "a\x00b"}, content_type="application/json")
                tried += 1
                if not 400 <= response.status_code < 500:
                    failures.append(f"{response.status_code} {method.upper()} {url} {field}")
    assert tried >= 10 and not failures, failures
