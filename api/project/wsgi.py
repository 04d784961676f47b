"""WSGI entry point: `gunicorn -c python:api.project.gunicorn_conf api.project.wsgi:application`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
application = get_wsgi_application()
