"""Django's PostgreSQL backend (as tenants.db_backend: tables keyed by tenant), pointed at the embedded server,
which it starts on first use."""

from kb.embedded.postgres import ensure_server
from tenants.db_backend import base


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict:
        params = super().get_connection_params()
        params["host"] = ensure_server()
        return params
