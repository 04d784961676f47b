"""OpenAPI: the API-key security schemes (registered by ApiConfig.ready) and the schema's introduction.

The introduction reaches the schema through the `describe_api` post-processing hook named in
SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"], so the served schema and `manage.py spectacular` carry it.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from rest_framework.request import Request

BEARER_SCHEME = "ApiKey"
HEADER_SCHEME = "ApiKeyHeader"

API_DESCRIPTION = """\
The REST API of grounded: corpora and documents, scoped search, grounded answers with verified
citations, conversations, and the audit trail of every run. Every request acts inside one tenant,
and within it inside the caller's departments; both come from the credentials, never from the request.

## Authentication

**API keys** (for applications). Send the key in either header:

    Authorization: Bearer gk_<id>_<secret>
    X-API-Key: gk_<id>_<secret>

Use **Authorize** above to try requests with one. A missing key is `401 not_authenticated`; an invalid
or revoked key is `401 authentication_failed`; too many failed keys from one address are `429` with
`Retry-After`, a valid key included, until the window ends.

**Where keys come from.** A tenant admin issues them: `POST /api/v1/keys/` with an admin key
(`{"name", "role", "all_departments", "departments"}`), or *API keys* in the admin site (`/admin/`).
An operator bootstraps the first admin and keys with
`manage.py create_tenant_admin --tenant <slug> --key-role admin --key-role reader`; `scripts/run` prints
such an admin key and a reader key for the demo tenant. The raw key is shown once, in the answer that
creates it, and stored only hashed: keep it then. `DELETE /api/v1/keys/{id}/` revokes a key at once.

**Sessions** (the chat page and the admin site). A user signed in at `/login/` or `/admin/` is accepted
with their membership's role and departments. A user who belongs to several tenants sends
`X-Tenant: <slug>` on every request (without it, or with a tenant not theirs: 400 on `X-Tenant`).
Unsafe methods then need the CSRF token (`X-CSRFToken`).

## Roles

| role | may |
|---|---|
| reader | search, ask, conversations, feedback; read corpora, documents, jobs, sources, departments |
| editor | + upload, re-ingest and delete documents |
| admin | + create, change and delete corpora and sources; API keys and members; runs, feedback and the chain |
| auditor | runs, feedback and the chain only |

A request the role does not allow is `403 permission_denied`, naming the roles it needs. A key or
member limited to departments sees only those departments' rows (and the tenant-wide ones), and
changes only its own departments'. A grant never exceeds the granter: a key's role is at most the
issuer's, its departments a subset of the issuer's. Another tenant's id answers 404, exactly like a
missing one.

Errors have one shape, `{"error": {"code", "message", "fields"}}`, with `fields` naming every input at
fault. Requests are rate-limited per key (429 with `Retry-After`).
"""


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """api.auth.ApiKeyAuthentication as two alternative schemes: the Bearer header or X-API-Key."""

    target_class = "api.auth.ApiKeyAuthentication"
    name = [BEARER_SCHEME, HEADER_SCHEME]

    def get_security_requirement(self, auto_schema: AutoSchema) -> list[dict[str, list]]:
        # One requirement per scheme: either header is enough (a single dict would demand both).
        return [{BEARER_SCHEME: []}, {HEADER_SCHEME: []}]

    def get_security_definition(self, auto_schema: AutoSchema) -> list[dict[str, str]]:
        return [
            {"type": "http", "scheme": "bearer", "bearerFormat": "gk_<id>_<secret>",
             "description": "`Authorization: Bearer gk_<id>_<secret>`: an API key (see the introduction)."},
            {"type": "apiKey", "in": "header", "name": "X-API-Key",
             "description": "`X-API-Key: gk_<id>_<secret>`: the same API key in its own header."},
        ]


def describe_api(result: dict, generator: SchemaGenerator, request: Request | None, public: bool) -> dict:
    """Post-processing hook (after drf-spectacular's enum hook): the introduction as `info.description`."""
    result.setdefault("info", {})["description"] = API_DESCRIPTION
    return result
