"""The Celery app. Eager (in-process) when no broker is configured; a real worker on Redis otherwise.

Loaded by api/project/__init__.py, so it is the current app in every process that loads the settings:
the apps declare their tasks with `shared_task` and send by name through `celery.current_app`; none of
them imports this module. Run a worker with `celery -A api.project worker`."""

import os

from celery import Celery
from celery.signals import worker_process_init

from tenants.conf.environment import get_int

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "api.project.settings")

app = Celery("grounded")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# `celery -A api.project beat` re-enqueues ingestion jobs whose worker died (a running job silent for 90 s: it
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



@worker_process_init.connect
def warm_up_pool_process(**kwargs) -> None:
    """Each pool process loads the embedding model and opens its database connection before its
    first job (api/project/warmup.py), not inside it. (The solo pool, used by tests, has no pool processes.)"""
    # Imported here: the warm-up reads models and app registries, which exist only once Django is set up (in a
    # pool process, by now); this module is loaded with the settings, before that.
    from api.project import warmup

    if warmup.enabled():
        warmup.warm_up(web=False)
