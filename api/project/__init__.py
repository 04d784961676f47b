"""The project's wiring, above the four apps: how the processes are configured and started. No app imports
it (the import contract in pyproject.toml); the apps contribute health reports and warm-up steps through
tenants.process_hooks, and read configuration through tenants.conf.

- `settings`: the Django settings (DJANGO_SETTINGS_MODULE=api.project.settings), built from tenants.conf;
- `urls`: the root URLconf (the admin, the chat page, /healthz, the API, /mcp);
- `celery`: the Celery app (loaded here, so `shared_task`s bind to it) and its beat schedule;
- `wsgi`, `asgi` and `gunicorn_conf`: the web server;
- `warmup`: the start-up warm-up of a web or worker process; `health`: GET /healthz.
"""

from api.project.celery import app as celery_app

__all__ = ["celery_app"]
