"""The Celery app. Eager (in-process) when no broker is configured; a real worker on Redis otherwise."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.settings")

app = Celery("grounded")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
