"""The Celery app. Eager (in-process) when no broker is configured; a real worker on Redis otherwise."""

import os

from celery import Celery

from kb.project.config import get_int

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kb.project.settings")

app = Celery("grounded")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# `celery -A kb beat` re-enqueues ingestion jobs whose worker died (a running job silent for 90 s: it
# beats at every progress step; a queued one untouched for 10 min),
# signs every tenant's chain tip into CHAIN_DIGEST_DIR (agents/digests.py), and every minute queues a
# sync of each source whose schedule is due (kb.sources.sync.schedule_due_sources).
app.conf.beat_schedule = {
    "reap-stuck-ingest-jobs": {"task": "kb.reap_stuck_jobs", "schedule": 30.0,
                               "kwargs": {"older_than": 600, "running_older_than": 90}},
    "write-chain-digests": {"task": "agents.write_chain_digests",
                            "schedule": float(get_int("CHAIN_DIGEST_INTERVAL_S"))},
    "schedule-source-syncs": {"task": "kb.schedule_source_syncs", "schedule": 60.0},
}

