"""tenants.conf.product (issue 49): every product setting declared once and read through one object,
`product_settings.NAME`: Django's setting, else the environment, else the default; unknown names refused;
overrides seen and undone (setting_changed); a start-up check of types and undeclared names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tenants.conf import environment, product, product_settings

ROOT = Path(__file__).resolve().parents[1]


def test_an_unknown_name_raises_naming_the_closest_declared_one():
    with pytest.raises(AttributeError, match=r"RETRIEVAL_RRF is not a declared product setting \(did you mean RETRIEVAL_RRF_K\?\)"):
        product_settings.RETRIEVAL_RRF  # noqa: B018  (the read is the test)
    with pytest.raises(AttributeError, match="see python -m tenants.conf.docs --list"):
        product_settings.NOTHING_LIKE_IT  # noqa: B018


def test_a_django_only_setting_is_its_default_until_django_defines_it(settings):
    assert product_settings.RETRIEVAL_RRF_K == 60
    settings.RETRIEVAL_RRF_K = 7
    assert product_settings.RETRIEVAL_RRF_K == 7


def test_an_override_is_seen_and_undone_on_setting_changed(settings):
    before = product_settings.MAX_UPLOAD_BYTES  # cached now
    with override_settings(MAX_UPLOAD_BYTES=5):  # what pytest-django's `settings` fixture enables, and disables at teardown
        assert product_settings.MAX_UPLOAD_BYTES == 5
    assert before == product_settings.MAX_UPLOAD_BYTES
    settings.MAX_UPLOAD_BYTES = 123
    assert product_settings.MAX_UPLOAD_BYTES == 123


def test_the_fixture_override_of_the_previous_test_is_gone():
    assert environment.get("MAX_UPLOAD_BYTES") == product_settings.MAX_UPLOAD_BYTES


def test_an_environment_backed_setting_follows_the_environment(monkeypatch):
    monkeypatch.setenv("GROUNDED_EMBED_BATCH", "3")
    assert product_settings.GROUNDED_EMBED_BATCH == 3
    monkeypatch.setenv("GROUNDED_EMBED_BATCH", "5")
    assert product_settings.GROUNDED_EMBED_BATCH == 5
    monkeypatch.delenv("GROUNDED_EMBED_BATCH")
    assert environment.SETTINGS["GROUNDED_EMBED_BATCH"].default == product_settings.GROUNDED_EMBED_BATCH


def test_a_django_setting_wins_over_the_environment(settings, monkeypatch):
    monkeypatch.setenv("GROUNDED_EMBED_BATCH", "3")
    settings.GROUNDED_EMBED_BATCH = 9
    assert product_settings.GROUNDED_EMBED_BATCH == 9


def test_without_django_settings_the_environment_and_the_defaults_are_read():
    """A script or helper process that reads a product setting before (or without) Django's settings."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"} | {"GROUNDED_EMBED_BATCH": "7"}
    code = "from tenants.conf import product_settings as p; print(p.GROUNDED_EMBED_BATCH, p.RETRIEVAL_RRF_K)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["7", "60"]


def test_a_renamed_variable_sets_its_product_setting():
    assert product.DECLARED["DEFAULT_EMBEDDER"].env == "GROUNDED_EMBEDDER"
    assert product.DECLARED["DEFAULT_EMBEDDER"].doc == environment.SETTINGS["GROUNDED_EMBEDDER"].doc  # declared once


def test_the_start_up_check_passes_on_the_project_settings():
    assert product.problems() == []
    product.check()


def test_the_start_up_check_rejects_a_bad_type_and_an_undeclared_name_in_one_message():
    source = SimpleNamespace(RETRIEVAL_RRF_K="60", RETRIEVAL_FOO=1, SOURCES_WEB_MAX_PAGES=0, DATABASE_WALL_KEY=b"secret",
                             RETRIEVAL_HNSW_TUPLE_COST=5, CELERY_ANYTHING=1, AUTH_USER_MODEL="auth.User")
    assert product.problems(source) == [
        "RETRIEVAL_RRF_K must be an integer, got str '60'",
        "DATABASE_WALL_KEY must be a string, got bytes",  # a secret's value is never repeated
        "SOURCES_WEB_MAX_PAGES must be at least 1, got 0",
        "unknown product setting RETRIEVAL_FOO (did you mean RETRIEVAL_RRF_K?)",
    ]
    with pytest.raises(ImproperlyConfigured, match="RETRIEVAL_RRF_K must be an integer.*; .*RETRIEVAL_FOO"):
        product.check(source)


def test_the_start_up_check_sees_the_django_settings(settings):
    settings.RETRIEVAL_FOO = 1
    with pytest.raises(ImproperlyConfigured, match="unknown product setting RETRIEVAL_FOO"):
        product.check()


def test_product_prefixes_come_from_the_declarations_and_spare_djangos_own():
    assert {"RETRIEVAL_", "SOURCES_", "RATE_", "VECTOR_"} <= product.PREFIXES
    assert not {"AUTH_", "DATABASE_", "DEFAULT_", "CELERY_"} & product.PREFIXES


def test_the_apps_read_no_setting_with_getattr():
    """The issue's grep: product settings are read as product_settings.NAME, never getattr(settings, name, default)."""
    found = subprocess.run(["grep", "-rn", "getattr(settings", "tenants", "kb", "agents", "api"], cwd=ROOT,
                           capture_output=True, text=True, check=False)
    assert found.returncode == 1 and not found.stdout, found.stdout


def test_the_apps_read_product_settings_only_through_the_accessor():
    """A product setting read from django.conf.settings would skip the declaration (and the environment fallback)."""
    read = re.compile(r"(?<![\w.])settings\.([A-Z][A-Z0-9_]+)")
    direct = {(path.relative_to(ROOT).as_posix(), name)
              for folder in ("tenants", "kb", "agents", "api") for path in (ROOT / folder).rglob("*.py")
              if path.relative_to(ROOT).parts[:2] not in {("api", "project"), ("tenants", "conf")}
              for name in read.findall(path.read_text()) if name in product.DECLARED}
    assert not direct, f"read as django.conf.settings.X, not product_settings.X: {sorted(direct)}"
