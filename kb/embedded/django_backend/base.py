"""Django's PostgreSQL backend, pointed at the embedded server, which it starts on first use."""

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict:
        from kb.embedded.postgres import ensure_server

        params = super().get_connection_params()
        params["host"] = ensure_server()
        return params
