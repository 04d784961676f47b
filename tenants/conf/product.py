"""The product's settings, each declared once and read through one object, `product_settings.NAME`
(in the style of DRF's `api_settings`, rest_framework/settings.py).

A product setting is one the apps (tenants, kb, agents, api) read; Django's own settings (AUTH_USER_MODEL,
ALLOWED_HOSTS, SECRET_KEY, ...) and the project wiring's are read as `django.conf.settings.X`. Two kinds:
- backed by an environment variable: listed in `FROM_ENVIRONMENT`, declared (type, default, doc) in
  `environment.py` (`GROUNDED_EMBEDDER` sets `DEFAULT_EMBEDDER`, most keep the variable's name);
- Django-only, declared here in `DJANGO_ONLY`: the retrieval and vector-index tunables, which a deployment
  sets in a settings module, not in the environment.

Contracts:
- `product_settings.NAME` is (1) the Django setting NAME when django.conf.settings defines it (the project's
  settings module sets most environment-backed ones at start; a test overrides it with pytest-django's
  `settings` fixture), else (2) for an environment-backed setting, its variable parsed now
  (`environment.get`: tests change the environment at run time; its default when unset), else (3) the
  declared default.
- Values of (1) and (3) are cached; Django's `setting_changed` signal (override_settings, pytest-django's
  `settings` fixture) clears the cache. A plain assignment to django.conf.settings is not seen once cached.
- An undeclared NAME raises AttributeError naming the closest declared one.
- `check()` runs at start (TenantsConfig.ready): ImproperlyConfigured listing, in one message, every
  declared setting whose Django value is not of its type (below its minimum, not one of its choices) and
  every Django setting with a product prefix (`PREFIXES`: the first word of a declared name that no
  setting of Django's own starts with: RETRIEVAL_, SOURCES_, RATE_, ...) that is not declared.
- `python -m tenants.conf.docs --write` documents both kinds in docs/configuration.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django import conf
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from tenants.conf import environment


@dataclass(frozen=True)
class ProductSetting(environment.Declaration):
    """One product setting (see environment.Declaration), by its Django name; `env`: the environment
    variable that sets it (declared in environment.py), or None for a Django-only setting."""

    env: str | None = None


RETRIEVAL, VECTOR_INDEXES = "Retrieval", "Vector indexes"
GROUP_INTROS = {
    RETRIEVAL: "How a search plans, ranks and fuses its candidates; measured defaults ([retrieval.md](retrieval.md)).",
    VECTOR_INDEXES: "The per-tenant and per-department partial HNSW indexes `kb/vector_index.py` builds for large scopes "
                    "([retrieval.md](retrieval.md#scope-indexes)).",
}

DJANGO_ONLY: tuple[ProductSetting, ...] = (
    ProductSetting("RETRIEVAL_EXACT_MAX_ROWS", int, 4000, "scopes up to this many rows (per model) are always scanned exactly",
                   RETRIEVAL, minimum=0),
    ProductSetting("RETRIEVAL_HNSW_TUPLE_COST", float, 10.0, "above it, HNSW is used when its expected work is smaller: it visits "
                   "about ef_search + fetch / selectivity index tuples (selectivity: scope rows / rows in the model's index), each "
                   "costing this many exact-scan rows", RETRIEVAL),
    ProductSetting("RETRIEVAL_HNSW_EF_SEARCH", int, 40, "`hnsw.ef_search` of an HNSW search", RETRIEVAL, minimum=1),
    ProductSetting("RETRIEVAL_HNSW_FETCH", int, 40, "in-scope rows taken from the relaxed-order HNSW scan before re-sorting exactly",
                   RETRIEVAL, minimum=1),
    ProductSetting("RETRIEVAL_HNSW_MAX_SCAN_TUPLES", int, 40000, "`hnsw.max_scan_tuples` of an HNSW search", RETRIEVAL, minimum=1),
    ProductSetting("RETRIEVAL_SCOPE_INDEXES", bool, True, "use the per-tenant and per-department partial HNSW indexes "
                   "`kb/vector_index.py` builds for large scopes", RETRIEVAL),
    ProductSetting("RETRIEVAL_RRF_K", int, 60, "reciprocal rank fusion's k: score = sum(weight / (k + rank))", RETRIEVAL, minimum=0),
    ProductSetting("RETRIEVAL_KEYWORD_WEIGHT", float, 1.0, "the keyword (BM25) side's weight in fusion", RETRIEVAL),
    ProductSetting("RETRIEVAL_VECTOR_WEIGHT", float, 0.1, "the vector side's weight in fusion (shared by the models searched)",
                   RETRIEVAL),
    ProductSetting("RETRIEVAL_CANDIDATES", int, 50, "candidates each side contributes to fusion and the re-rank", RETRIEVAL,
                   minimum=1),
    ProductSetting("RETRIEVAL_BM25_CANDIDATE_SHARE", float, 0.1, "keyword candidates come from the rarest query lexemes covering "
                   "at most this share of the chunks (1: every lexeme, exact BM25 top-n, no cap either)", RETRIEVAL, minimum=0),
    ProductSetting("RETRIEVAL_BM25_MAX_CANDIDATES", int, 1000, "... and at most this many chunks, estimated from document "
                   "frequencies (keyword search costs per candidate, so large corpora need an absolute cap too; 0: none)",
                   RETRIEVAL, minimum=0),
    ProductSetting("RETRIEVAL_BM25_K1", float, 1.2, "BM25's k1", RETRIEVAL, minimum=0),
    ProductSetting("RETRIEVAL_BM25_B", float, 0.75, "BM25's b", RETRIEVAL, minimum=0),
    ProductSetting("RETRIEVAL_TERM_STATS_TTL_S", int, 300, "seconds a process keeps a corpus's term statistics", RETRIEVAL,
                   minimum=0),
    ProductSetting("RETRIEVAL_PREPARED_STATEMENTS", bool, True, "run the ranking and hit-row statements as prepared statements of "
                   "the connection (generic plans, no planning per search); off behind a transaction-pooling proxy (PgBouncer "
                   "`pool_mode=transaction`), where a session's prepared statements are not its own", RETRIEVAL),
    ProductSetting("RETRIEVAL_REUSE_PLANS", bool, True, "a vector search of a scope this process resolved before builds its plan "
                   "from the corpus rows it saw then and sends the corpus statement with its ranking (one round trip; checked, "
                   "and searched again when the corpora changed)", RETRIEVAL),
    ProductSetting("VECTOR_SCOPE_INDEX_MIN_ROWS", int, 4000, "smallest scope (rows of a model) given its own partial index; "
                   "smaller ones are scanned exactly (`RETRIEVAL_EXACT_MAX_ROWS`)", VECTOR_INDEXES, minimum=0),
    ProductSetting("VECTOR_SCOPE_INDEX_MAX_SHARE", float, 0.5, "a scope holding more than this share of its parent's rows is "
                   "served by the parent's index", VECTOR_INDEXES, minimum=0),
)


# The product settings an environment variable sets, by name -> the variable (declared, with its type, default
# and doc, in environment.py). Most keep the variable's name.
FROM_ENVIRONMENT: dict[str, str] = {name: name for name in (
    "DATABASE_APP_USER", "DATABASE_APP_PASSWORD", "DATABASE_WALL_KEY", "DATABASE_WALL_KEY_FILE",
    "CHAIN_SIGNING_KEY", "CHAIN_SIGNING_KEY_FILE", "CHAIN_DIGEST_DIR", "CHAIN_DIGEST_INTERVAL_S", "EVIDENCE_RETENTION_DAYS",
    "GROUNDED_MCP_KEY", "GEMINI_API_KEY", "GEMINI_MODEL", "GEMINI_BASE_URL",
    "OPENAI_COMPAT_BASE_URL", "OPENAI_COMPAT_MODEL", "OPENAI_COMPAT_API_KEY",
    "GROUNDED_EMBEDDER_PLUGINS", "GROUNDED_MPNET_PATH", "GROUNDED_EMBED_BACKEND", "GROUNDED_ONNX_DIR", "GROUNDED_ONNX_THREADS",
    "GROUNDED_RELEVANCE_MODEL", "GROUNDED_RELEVANCE_MAX_TOKENS", "GROUNDED_RELEVANCE_THRESHOLD", "GROUNDED_JUDGE_TRACE",
    "GROUNDED_EMBED_BATCH", "GROUNDED_INGEST_GROUP", "GROUNDED_WARMUP_MODELS",
    "MAX_UPLOAD_BYTES", "MAX_FILES_PER_UPLOAD", "PARSE_ISOLATED", "PARSE_MAX_SECONDS", "PARSE_MAX_MEMORY_MB",
    "RATE_LIMIT_PER_MINUTE", "RATE_LIMIT_REDIS_URL", "AUTH_FAILURES_PER_IP", "AUTH_FAILURE_WINDOW_SECONDS",
    "SIGN_IN_FAILURES_PER_ACCOUNT", "SIGN_IN_ACCOUNT_WINDOW_SECONDS", "DEFAULT_DAILY_RUNS", "RETRIEVAL_PARALLEL_WORKERS",
    "ANSWER_CACHE_TTL_SECONDS", "ANSWER_CACHE_REDIS_URL",
    "SOURCES_ENCRYPTION_KEY", "SOURCES_FOLDER_ROOTS", "SOURCES_ALLOW_PRIVATE_HOSTS", "SOURCES_WEB_MAX_PAGES",
    "SOURCES_WEB_MAX_DEPTH", "SOURCES_WEB_MAX_PAGE_BYTES", "SOURCES_WEB_TIMEOUT_SECONDS", "SOURCES_WEB_TIME_LIMIT_SECONDS",
    "SOURCES_SCHEDULER_INTERVAL_SECONDS", "REPLICA_PIN_SECONDS", "REPLICA_MAX_LAG_SECONDS",
    "INVITE_LINK_MAX_AGE_SECONDS", "PASSWORD_RESET_REQUESTS_PER_HOUR",
    "OIDC_RP_CLIENT_ID", "OIDC_RP_CLIENT_SECRET", "OIDC_OP_DISCOVERY_URL", "OIDC_OP_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT", "OIDC_OP_USER_ENDPOINT", "OIDC_OP_JWKS_ENDPOINT", "OIDC_RP_SIGN_ALGO", "OIDC_PROVIDER_NAME",
)} | {"DEFAULT_EMBEDDER": "GROUNDED_EMBEDDER", "DEFAULT_ANSWER_PROVIDER": "GROUNDED_PROVIDER"}


def _from_environment(name: str, variable: str) -> ProductSetting:
    setting = environment.SETTINGS[variable]
    return ProductSetting(name, setting.type, setting.default, setting.doc, setting.group, shown=setting.shown,
                          choices=setting.choices, minimum=setting.minimum, secret=setting.secret, env=variable)


DECLARED: dict[str, ProductSetting] = {s.name: s for s in (
    *DJANGO_ONLY, *(_from_environment(name, variable) for name, variable in FROM_ENVIRONMENT.items()))}
if len(DECLARED) != len(DJANGO_ONLY) + len(FROM_ENVIRONMENT):
    raise RuntimeError("a product setting is declared twice")


def _first_word(name: str) -> str:
    return name.split("_", 1)[0] + "_"


# Django's own settings' first words (AUTH_, DATABASE_, DEFAULT_, ...) are not product prefixes.
PREFIXES: frozenset[str] = frozenset({_first_word(n) for n in DECLARED} - {_first_word(n) for n in dir(global_settings) if n.isupper()})
_UNSET = object()


def closest(name: str) -> str:
    """'did you mean X?' for the declared name closest to `name`, or where to find the declared ones."""
    match = difflib.get_close_matches(name, list(DECLARED), n=1, cutoff=0.6)
    return f"did you mean {match[0]}?" if match else "see python -m tenants.conf.docs --list"


class ProductSettings:
    """`product_settings.NAME`: the value of the declared product setting NAME (module docstring). A cached
    value is an attribute of the object, as in DRF's `APISettings`: read without calling `__getattr__`."""

    def __init__(self, declared: dict[str, ProductSetting]) -> None:
        self._declared = declared

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not attributes of the object: product settings not cached yet.
        declared = self._declared.get(name) if not name.startswith("_") else None  # "_...": before __init__ (copy)
        if declared is None:
            raise AttributeError(f"{name} is not a declared product setting ({closest(name)})")
        try:
            value = getattr(conf.settings, name, _UNSET)
        except ImproperlyConfigured:  # Django not configured (a script, a helper process): nothing cached, settings may come
            return environment.get(declared.env) if declared.env is not None else declared.default
        if value is _UNSET:
            if declared.env is not None:
                return environment.get(declared.env)  # read at each call, not cached
            value = declared.default
        setattr(self, name, value)
        return value

    def __dir__(self) -> Iterable[str]:
        return [*super().__dir__(), *self._declared]

    def reload(self) -> None:
        """Forget the cached values (Django's `setting_changed` calls it)."""
        for name in [n for n in vars(self) if n in self._declared]:
            vars(self).pop(name, None)


product_settings = ProductSettings(DECLARED)


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting in DECLARED:
        product_settings.reload()


setting_changed.connect(_reload, dispatch_uid="tenants.conf.product.reload")


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "a list"}


def _type_problem(setting: ProductSetting, value: Any) -> str | None:
    expected, shown = setting.type, "" if setting.secret else f" {value!r}"
    if expected is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is list:
        ok = isinstance(value, list | tuple)
    else:
        ok = isinstance(value, expected)
    if not ok:
        return f"{setting.name} must be {_TYPE_NAMES[expected]}, got {type(value).__name__}{shown}"
    if setting.minimum is not None and value < setting.minimum:
        return f"{setting.name} must be at least {setting.minimum:g}, got{shown}"
    if setting.choices is not None and value not in setting.choices:
        return f"{setting.name} must be one of {', '.join(setting.choices)}, got{shown}"
    return None


def problems(source: Any = None) -> list[str]:
    """What is wrong with the Django settings `source` (default: django.conf.settings): each declared
    setting it defines with a value not of its type, and each setting with a product prefix it defines
    that is not declared (with the closest declared name)."""
    source = conf.settings if source is None else source
    found = []
    for name, setting in DECLARED.items():
        value = getattr(source, name, _UNSET)
        if value is not _UNSET and (problem := _type_problem(setting, value)):
            found.append(problem)
    for name in sorted(n for n in dir(source) if n.isupper() and _first_word(n) in PREFIXES and n not in DECLARED):
        found.append(f"unknown product setting {name} ({closest(name)})")
    return found


def check(source: Any = None) -> None:
    """Start-up check: ImproperlyConfigured listing, in one message, every problem `problems` finds."""
    found = problems(source)
    if found:
        raise ImproperlyConfigured("; ".join(found))
