"""Knowledge base: corpora, documents, chunks, ingestion and retrieval. Two subpackages stand apart
from that domain: `kb.project` (the project's wiring: settings, Celery app, web server, warm-up,
health) and `kb.embedded` (the embedded PostgreSQL and Redis used when none is configured)."""

from kb.project.celery import app as celery_app

__all__ = ["celery_app"]
