"""OpenAPI description of the API-key authentication (imported by ApiConfig.ready)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "gk_<id>_<secret>",
                "description": "`Authorization: Bearer gk_...` (or the `X-API-Key` header)."}
