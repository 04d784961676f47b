"""ASGI entry point (`uvicorn api.project.asgi:application`); the shipped server is gunicorn on WSGI."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")
application = get_asgi_application()
