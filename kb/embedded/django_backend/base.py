"""Django's PostgreSQL backend, pointed at the embedded server, which it starts on first use."""

from django.db.backends.postgresql import base

from kb.embedded.postgres import ensure_server


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict:
        params = super().get_connection_params()
        params["host"] = ensure_server()
        return params
