"""One env-driven settings module. Production differences come only from environment variables,
each declared once in tenants/conf/environment.py (type, default, doc) and read here through it.

Bad configuration fails at start with one line naming the setting (ImproperlyConfigured): a value
that does not parse, or a GROUNDED_* variable that is not declared (tenants.conf.environment.check_environment).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from tenants.conf import environment as config
from tenants.conf.environment import get_bool, get_int, get_list, get_str

try:
    config.check_environment()
except config.ConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None

BASE_DIR = Path(__file__).resolve().parents[2]


def parse_database_url(url: str, name: str = "DATABASE_URL") -> dict:
    """postgres://user:password@host:port/name?sslmode=... -> Django DATABASES entry (`name`: the variable, for errors)."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"} or not parts.path.strip("/"):
        raise ImproperlyConfigured(
            f"{name} is malformed: expected postgres://user:password@host:port/dbname"
        )
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name} is malformed: the port is not a number") from None
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = parts.hostname or query.pop("host", "")
    return {
        "ENGINE": "tenants.db_backend",  # Django's PostgreSQL backend, for tables keyed by tenant
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(port or ""),
        "OPTIONS": query,
        "CONN_MAX_AGE": get_int("DB_CONN_MAX_AGE"),
        "CONN_HEALTH_CHECKS": True,
    }


def secret_key_from_file(path: str) -> str:
    """The key stored in `path`; a missing file is created first (random, mode 0600, atomically, so
    processes starting together agree on one key)."""
    file = Path(path)
    try:
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(50) + "\n")
            try:
                os.link(tmp, file)  # fails if another process created it first: its key wins
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        key = file.read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"SECRET_KEY_FILE {path} cannot be read or created: {exc.strerror}") from None
    if len(key) < 32:
        raise ImproperlyConfigured(f"SECRET_KEY_FILE {path} holds no usable key (fewer than 32 characters)")
    return key


# --- Core --------------------------------------------------------------------------------------
# With no DATABASE_URL the product runs as a single-machine embedded install, where DEBUG
# defaults on (scripts/run turns it off unless run with --debug); with a real database it defaults
# off. With DEBUG off a key is required: SECRET_KEY, or SECRET_KEY_FILE naming a file that holds
# one (created with a random key if missing; scripts/run keeps it beside the embedded database).
DEBUG = get_bool("DEBUG")
SECRET_KEY = get_str("SECRET_KEY")
if not SECRET_KEY and get_str("SECRET_KEY_FILE"):
    SECRET_KEY = secret_key_from_file(get_str("SECRET_KEY_FILE"))
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG=0")
    SECRET_KEY = "insecure-dev-key-only-for-local-embedded-mode-" + "x" * 20
ALLOWED_HOSTS = get_list("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = get_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "tenants.admin_site.GroundedAdminConfig",  # django.contrib.admin with the project's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our static files, not a CDN
    "tenants",
    "kb",
    "agents",
    "api",
    "bench.evaluation",  # manage.py evaluate: the evaluation harness, beside the product apps
]

MIDDLEWARE = [
    "api.project.warmup.WarmupGate",  # while this process warms up, a request waits for it (/healthz answers 503 at once)
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "api.nul_bytes.RejectNulBytes",  # 400 for NUL in a path, query parameter or form field (PostgreSQL text cannot hold it)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Django's sign-in by username and password, storing an upgraded password hash where the database allows
# it (tenants/accounts.py; the application role changes a password only inside the user's home tenant).
AUTHENTICATION_BACKENDS = ["tenants.accounts.SignInBackend"]
LOGIN_REDIRECT_URL = "/"  # a sign-in at /login/ without `next` lands in the chat (Django's default is a 404)

# Single sign-on through the company's OpenID Connect provider (tenants/oidc.py, api/oidc.py): off without a client id
# (then no backend, no button, and /oidc/ answers 404; tests override these settings). It signs in existing, active
# accounts by verified email only.
OIDC_RP_CLIENT_ID = get_str("OIDC_RP_CLIENT_ID")
if OIDC_RP_CLIENT_ID:
    AUTHENTICATION_BACKENDS.append("tenants.oidc.CompanySignInBackend")
OIDC_RP_CLIENT_SECRET = get_str("OIDC_RP_CLIENT_SECRET")
OIDC_OP_DISCOVERY_URL = get_str("OIDC_OP_DISCOVERY_URL")
OIDC_OP_AUTHORIZATION_ENDPOINT = get_str("OIDC_OP_AUTHORIZATION_ENDPOINT")
OIDC_OP_TOKEN_ENDPOINT = get_str("OIDC_OP_TOKEN_ENDPOINT")
OIDC_OP_USER_ENDPOINT = get_str("OIDC_OP_USER_ENDPOINT")
OIDC_OP_JWKS_ENDPOINT = get_str("OIDC_OP_JWKS_ENDPOINT")
OIDC_RP_SIGN_ALGO = get_str("OIDC_RP_SIGN_ALGO")
OIDC_PROVIDER_NAME = get_str("OIDC_PROVIDER_NAME")
# mozilla-django-oidc's other settings are fixed in tenants/oidc.py (FIXED: PKCE and nonce on, no user created).

# Invitations and password resets (tenants/invitations.py, api/onboarding.py) are emailed: through SMTP when
# EMAIL_HOST is set, else printed on the server's console (scripts/run's terminal).
EMAIL_HOST = get_str("EMAIL_HOST")
EMAIL_BACKEND = ("django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST
                 else "django.core.mail.backends.console.EmailBackend")
EMAIL_PORT = get_int("EMAIL_PORT")
EMAIL_HOST_USER = get_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = get_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = get_bool("EMAIL_USE_TLS")
EMAIL_TIMEOUT = 10  # seconds: an unreachable SMTP server fails the send instead of holding a web worker
DEFAULT_FROM_EMAIL = get_str("DEFAULT_FROM_EMAIL")
INVITE_LINK_MAX_AGE_SECONDS = get_int("INVITE_LINK_MAX_AGE_SECONDS")
PASSWORD_RESET_TIMEOUT = get_int("PASSWORD_RESET_LINK_MAX_AGE_SECONDS")
PASSWORD_RESET_REQUESTS_PER_HOUR = get_int("PASSWORD_RESET_REQUESTS_PER_HOUR")
ROOT_URLCONF = "api.project.urls"
WSGI_APPLICATION = "api.project.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
                    if not DEBUG else "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_MANIFEST_STRICT = False

# --- Database ----------------------------------------------------------------------------------
# Two aliases on one database. "owner" owns the tables and runs migrations and named maintenance
# code; "default" is the application role: not superuser, not owner, no BYPASSRLS, so PostgreSQL
# row-level security applies to every query it makes.
DATABASE_APP_USER = get_str("DATABASE_APP_USER")
DATABASE_APP_PASSWORD = get_str("DATABASE_APP_PASSWORD")
_database_url = get_str("DATABASE_URL")
if _database_url:
    _owner = parse_database_url(_database_url)
    EMBEDDED_DATABASE = False
else:
    _owner = {
        "ENGINE": "kb.embedded.django_backend",
        "NAME": get_str("GROUNDED_DB_NAME"),
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "",
        "PORT": "",
        "OPTIONS": {},
        # Reused like a DATABASE_URL connection (a new one per request cost a backend start, its cold
        # catalog caches and the search's prepared statements: docs/api.md, "Load"); the health
        # check reconnects, and so restarts a stopped embedded server, on the next request.
        "CONN_MAX_AGE": get_int("DB_CONN_MAX_AGE"),
        "CONN_HEALTH_CHECKS": True,
    }
    EMBEDDED_DATABASE = True
_test_name = get_str("GROUNDED_TEST_DB")
_owner["TEST"] = {"NAME": _test_name}
_app = {**_owner, "USER": DATABASE_APP_USER, "PASSWORD": DATABASE_APP_PASSWORD, "TEST": {"NAME": _test_name}}
# "owner" is listed first so the test runner creates and migrates the test database as owner.
DATABASES = {"owner": _owner, "default": _app}
# A streaming standby, as the application role: searches, lists and the chat's reads may go there
# (tenants.replicas chooses per read; docs/replicas.md). Without DATABASE_REPLICA_URL there is no
# "replica" alias and every read stays on "default". The router sends no write and no migration there.
_replica_url = get_str("DATABASE_REPLICA_URL")
if _replica_url:
    _replica = parse_database_url(_replica_url, "DATABASE_REPLICA_URL")
    if not _replica["USER"]:
        _replica.update(USER=DATABASE_APP_USER, PASSWORD=DATABASE_APP_PASSWORD)
    _replica["TEST"] = {"MIRROR": "default"}  # tests read the standby of the test database, never create one
    DATABASES["replica"] = _replica
DATABASE_ROUTERS = ["tenants.replicas.ReplicaRouter"]
# The key that signs the tenant proofs row-level security checks (tenants/db_wall.py); hex.
DATABASE_WALL_KEY = get_str("DATABASE_WALL_KEY")
DATABASE_WALL_KEY_FILE = get_str("DATABASE_WALL_KEY_FILE")  # default: <GROUNDED_DATA_DIR>.db_wall_key

# --- Cache / broker / Celery -------------------------------------------------------------------
REDIS_URL = get_str("REDIS_URL")
CELERY_BROKER_URL = get_str("CELERY_BROKER_URL")  # default: REDIS_URL
for _name, _url in (("REDIS_URL", REDIS_URL), ("CELERY_BROKER_URL", CELERY_BROKER_URL)):
    if _url and urlsplit(_url).scheme not in {"redis", "rediss", "amqp", "pyamqp", "memory"}:
        raise ImproperlyConfigured(f"{_name} is malformed: expected redis://host:port/db")
# No broker configured: the embedded Redis (kb/embedded/redis_broker.py, a unix socket beside the embedded
# database), which scripts/run starts with a worker beside the web server.
EMBEDDED_BROKER = not CELERY_BROKER_URL
if EMBEDDED_BROKER:
    from kb.embedded.redis_broker import broker_url as _embedded_broker_url

    CELERY_BROKER_URL = _embedded_broker_url()
# Tasks run in the calling process (after commit) only when asked: the test suite and the benches.
CELERY_TASK_ALWAYS_EAGER = get_bool("CELERY_TASK_ALWAYS_EAGER")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A pool process warms up (loads the embedding model: api/project/warmup.py) before it reports itself up;
# Celery's default 4 s would have it killed as hung on a loaded machine.
CELERY_WORKER_PROC_ALIVE_TIMEOUT = get_int("CELERY_WORKER_PROC_ALIVE_TIMEOUT")
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_BACKEND = None
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": get_int("CELERY_VISIBILITY_TIMEOUT")}
CELERY_TASK_DEFAULT_QUEUE = get_str("CELERY_QUEUE")

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- Models and embeddings ---------------------------------------------------------------------
GEMINI_API_KEY = get_str("GEMINI_API_KEY")
GEMINI_BASE_URL = get_str("GEMINI_BASE_URL")  # for a self-hosted proxy or the test fake
GEMINI_MODEL = get_str("GEMINI_MODEL")
OPENAI_COMPAT_BASE_URL = get_str("OPENAI_COMPAT_BASE_URL")
OPENAI_COMPAT_MODEL = get_str("OPENAI_COMPAT_MODEL")
OPENAI_COMPAT_API_KEY = get_str("OPENAI_COMPAT_API_KEY")
# "local" (MiniLM shipped in a PyPI package), "hash" (tests only), or "gemini:<model>".
DEFAULT_EMBEDDER = get_str("GROUNDED_EMBEDDER")
DEFAULT_ANSWER_PROVIDER = get_str("GROUNDED_PROVIDER")  # default: the first configured of gemini, openai, else offline

# --- Uploads -----------------------------------------------------------------------------------
MAX_UPLOAD_BYTES = get_int("MAX_UPLOAD_BYTES")
MAX_FILES_PER_UPLOAD = get_int("MAX_FILES_PER_UPLOAD")
PARSE_ISOLATED = get_bool("PARSE_ISOLATED")  # kb/parse_sandbox.py
PARSE_MAX_SECONDS = get_int("PARSE_MAX_SECONDS")
PARSE_MAX_MEMORY_MB = get_int("PARSE_MAX_MEMORY_MB")
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_UPLOAD_BYTES + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = MAX_UPLOAD_BYTES + 1024 * 1024

# --- Sources (kb.sources, docs/sources.md) ------------------------------------------------------
# Fernet key for source credentials (`python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`).
# Empty: derived from SECRET_KEY (rotating SECRET_KEY then makes stored credentials unreadable: re-enter them).
SOURCES_ENCRYPTION_KEY = get_str("SOURCES_ENCRYPTION_KEY")
# Folders a folder source may read (comma-separated absolute paths); empty: folder sources are refused.
SOURCES_FOLDER_ROOTS = get_list("SOURCES_FOLDER_ROOTS")
# Website and S3 endpoints on loopback, private or link-local addresses are refused unless this is on.
SOURCES_ALLOW_PRIVATE_HOSTS = get_bool("SOURCES_ALLOW_PRIVATE_HOSTS")
# Website crawl limits (a source's config may lower them, never raise them).
SOURCES_WEB_MAX_PAGES = get_int("SOURCES_WEB_MAX_PAGES")
SOURCES_WEB_MAX_DEPTH = get_int("SOURCES_WEB_MAX_DEPTH")
SOURCES_WEB_MAX_PAGE_BYTES = get_int("SOURCES_WEB_MAX_PAGE_BYTES")
SOURCES_WEB_TIMEOUT_SECONDS = get_int("SOURCES_WEB_TIMEOUT_SECONDS")
SOURCES_WEB_TIME_LIMIT_SECONDS = get_int("SOURCES_WEB_TIME_LIMIT_SECONDS")
# Embedded mode (no broker): how often the in-process scheduler (manage.py run_source_scheduler) looks for due sources.
SOURCES_SCHEDULER_INTERVAL_SECONDS = get_int("SOURCES_SCHEDULER_INTERVAL_SECONDS")

# --- REST framework ----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    # Client addresses (failed API-key lockout) come from REMOTE_ADDR unless this many trusted
    # proxies sit in front and append to X-Forwarded-For; a spoofed header is never believed.
    "NUM_PROXIES": get_int("NUM_PROXIES"),
}
SPECTACULAR_SETTINGS = {"TITLE": "grounded API", "VERSION": "1.0.0", "SERVE_INCLUDE_SCHEMA": False,
                        "COMPONENT_SPLIT_REQUEST": True, "SWAGGER_UI_DIST": "SIDECAR", "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
                        "REDOC_DIST": "SIDECAR"}
SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] = ["drf_spectacular.hooks.postprocess_schema_enums", "api.schema.describe_api"]
# Requests per minute per API key (or signed-in user); enforced atomically in Redis when
# RATE_LIMIT_REDIS_URL (default REDIS_URL) is set, else in the Django cache.
RATE_LIMIT_PER_MINUTE = get_int("RATE_LIMIT_PER_MINUTE")
# Hybrid searches run BM25 on this many side connections per process (kb/retrieval/retrieve.py); 0 = serial.
RETRIEVAL_PARALLEL_WORKERS = get_int("RETRIEVAL_PARALLEL_WORKERS")
RATE_LIMIT_REDIS_URL = get_str("RATE_LIMIT_REDIS_URL")  # default: REDIS_URL
# Failed API-key attempts per client address per window before it gets 429 (0 = no lockout).
AUTH_FAILURES_PER_IP = get_int("AUTH_FAILURES_PER_IP")
AUTH_FAILURE_WINDOW_SECONDS = get_int("AUTH_FAILURE_WINDOW_SECONDS")
# Failed sign-ins (admin, chat) per account, from any addresses, per window before it is locked (api/admin_login.py; 0 = none).
SIGN_IN_FAILURES_PER_ACCOUNT = get_int("SIGN_IN_FAILURES_PER_ACCOUNT")
SIGN_IN_ACCOUNT_WINDOW_SECONDS = get_int("SIGN_IN_ACCOUNT_WINDOW_SECONDS")
# Agent runs per tenant per UTC day when Tenant.settings has no "daily_runs"; 0 = unlimited.
DEFAULT_DAILY_RUNS = get_int("DEFAULT_DAILY_RUNS")

# Chain digests (agents/digests.py): each tenant's chain tip signed with an Ed25519 key kept out of the
# database, written to CHAIN_DIGEST_DIR on demand, at scripts/run's start and stop, and every CHAIN_DIGEST_INTERVAL_S
# (default 300) by Celery beat or the eager run's digest loop (manage.py write_chain_digests --loop).
CHAIN_SIGNING_KEY = get_str("CHAIN_SIGNING_KEY")  # base64 of a 32-byte Ed25519 private key
CHAIN_SIGNING_KEY_FILE = get_str("CHAIN_SIGNING_KEY_FILE")  # default: <GROUNDED_DATA_DIR>.chain_key
CHAIN_DIGEST_DIR = get_str("CHAIN_DIGEST_DIR")  # default: <GROUNDED_DATA_DIR>.digests
CHAIN_DIGEST_INTERVAL_S = get_int("CHAIN_DIGEST_INTERVAL_S")
# Days the text a run retrieved is kept for audit (agents/citations.py); Tenant.settings["evidence_retention_days"] overrides.
EVIDENCE_RETENTION_DAYS = get_int("EVIDENCE_RETENTION_DAYS")

# --- Security (production) ---------------------------------------------------------------------
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SESSION_COOKIE_SECURE = get_bool("SECURE_COOKIES")
    CSRF_COOKIE_SECURE = get_bool("SECURE_COOKIES")
    SECURE_SSL_REDIRECT = get_bool("SECURE_SSL_REDIRECT")
    SECURE_HSTS_SECONDS = get_int("SECURE_HSTS_SECONDS")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# SECURE_SSL_REDIRECT is left to the TLS-terminating proxy in front of gunicorn.
SILENCED_SYSTEM_CHECKS = ["security.W008"]



def not_a_healthz_answer(record: logging.LogRecord) -> bool:
    """django.request logs every 5xx response as an error; /healthz's 503 is its answer, not a server
    error: "warming" at every start (no line per probe then), or "degraded", which api/project/health.py
    logs itself with its reasons."""
    request = getattr(record, "request", None)
    return not (getattr(record, "status_code", None) == 503 and getattr(request, "path_info", None) == "/healthz")


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"not_a_healthz_answer": {"()": "django.utils.log.CallbackFilter", "callback": not_a_healthz_answer}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"filters": ["not_a_healthz_answer"]}},
    "root": {"handlers": ["console"], "level": get_str("LOG_LEVEL")},
}
