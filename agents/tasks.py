"""Celery tasks of the agents app: thin wrappers over plain functions."""

from __future__ import annotations

from celery import shared_task

from agents.digests import write_all_digests


@shared_task(name="agents.write_chain_digests")
def write_chain_digests() -> list[str]:
    """Sign and write the chain tip of every tenant whose chain moved since its newest digest (agents.digests;
    Celery beat runs it every CHAIN_DIGEST_INTERVAL_S); returns the files written."""
    return [str(p) for p in write_all_digests(changed_only=True)]
