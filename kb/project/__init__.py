"""The project's wiring: how the processes are configured and started, apart from the domain.

- `config`: every environment variable declared once (type, default, doc) and read through it;
  `config_docs` generates the configuration tables from it;
- `settings`: the Django settings (DJANGO_SETTINGS_MODULE=kb.project.settings), built from `config`;
- `celery`: the Celery app and its beat schedule; `wsgi` and `gunicorn_conf`: the web server;
- `warmup`: the start-up warm-up of a web or worker process; `health`: GET /healthz.

The root URLconf names every layer's views, so it lives in the top layer (`api/root_urls.py`).
"""
