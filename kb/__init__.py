"""Knowledge base: corpora, documents, chunks, ingestion and retrieval. Also hosts the project's
settings, urls and Celery app."""

from kb.celery import app as celery_app

__all__ = ["celery_app"]
