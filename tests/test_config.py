"""tenants.conf.environment: each setting declared once, parsed and validated through one accessor, unknown names refused."""

from __future__ import annotations

import pytest

from tenants.conf import environment as config
from tenants.conf.environment import ConfigError


def test_an_unset_or_empty_variable_means_its_default():
    assert config.get_int("GROUNDED_EMBED_BATCH", {}) == 64
    assert config.get_int("GROUNDED_EMBED_BATCH", {"GROUNDED_EMBED_BATCH": "  "}) == 64
    assert config.get_list("ALLOWED_HOSTS", {}) == ["localhost", "127.0.0.1", "[::1]", "testserver"]


def test_values_are_parsed_to_the_declared_type():
    env = {"GROUNDED_EMBED_BATCH": " 8 ", "SOURCES_ALLOW_PRIVATE_HOSTS": "Yes", "GROUNDED_SLOW_EMBED_S": "0.25",
           "SOURCES_FOLDER_ROOTS": "/a, ,/b ,", "LOG_LEVEL": "info"}
    assert config.get_int("GROUNDED_EMBED_BATCH", env) == 8
    assert config.get_bool("SOURCES_ALLOW_PRIVATE_HOSTS", env) is True
    assert config.get_float("GROUNDED_SLOW_EMBED_S", env) == 0.25
    assert config.get_list("SOURCES_FOLDER_ROOTS", env) == ["/a", "/b"]
    assert config.get_str("LOG_LEVEL", env) == "INFO"  # the declared spelling of a choice


def test_the_process_environment_is_read_at_each_call(monkeypatch):
    monkeypatch.setenv("GROUNDED_EMBED_BATCH", "3")
    assert config.get_int("GROUNDED_EMBED_BATCH") == 3
    monkeypatch.setenv("GROUNDED_EMBED_BATCH", "5")
    assert config.get_int("GROUNDED_EMBED_BATCH") == 5


def test_computed_defaults_follow_the_settings_they_come_from():
    assert config.get_bool("DEBUG", {}) is True
    assert config.get_bool("DEBUG", {"DATABASE_URL": "postgres://u@h/db"}) is False
    assert config.get_bool("DEBUG", {"DATABASE_URL": "postgres://u@h/db", "DEBUG": "1"}) is True
    assert config.get_str("CHAIN_DIGEST_DIR", {"GROUNDED_DATA_DIR": "/srv/pg"}) == "/srv/pg.digests"
    assert config.get_str("GROUNDED_REDIS_DIR", {"GROUNDED_DATA_DIR": "/srv/pg"}) == "/srv/pg.redis"
    assert config.get_str("GUNICORN_BIND", {"HOST": "0.0.0.0", "PORT": "9000"}) == "0.0.0.0:9000"  # noqa: S104  (a setting's value under test, nothing binds)
    assert config.get_str("GROUNDED_PROVIDER", {"OPENAI_COMPAT_BASE_URL": "http://x"}) == "openai"
    assert config.get_str("RATE_LIMIT_REDIS_URL", {"REDIS_URL": "redis://r/1"}) == "redis://r/1"


@pytest.mark.parametrize(("env", "message"), [
    ({"GROUNDED_EMBED_BATCH": "abc"}, "GROUNDED_EMBED_BATCH must be an integer, got 'abc'"),
    ({"GROUNDED_EMBED_BATCH": "0"}, "GROUNDED_EMBED_BATCH must be at least 1, got '0'"),
    ({"DEBUG": "maybe"}, "DEBUG must be a boolean (1/0, true/false, yes/no, on/off), got 'maybe'"),
    ({"GROUNDED_SLOW_EMBED_S": "slow"}, "GROUNDED_SLOW_EMBED_S must be a number, got 'slow'"),
    ({"GROUNDED_PROVIDER": "claude"}, "GROUNDED_PROVIDER must be one of offline, gemini, openai, openai_compat, got 'claude'"),
])
def test_a_bad_value_fails_with_a_message_naming_the_variable(env, message):
    name = next(iter(env))
    with pytest.raises(ConfigError) as exc:
        config.get(name, env)
    assert str(exc.value) == message
    with pytest.raises(ConfigError) as at_start:
        config.check_environment(env)
    assert str(at_start.value) == message


def test_a_secret_value_is_never_repeated_in_a_message(monkeypatch):
    secret = config.Setting("X_TOKEN_COUNT", int, 1, "a secret number", config.SERVICES, secret=True)
    monkeypatch.setitem(config.SETTINGS, secret.name, secret)
    with pytest.raises(ConfigError) as exc:
        config.get("X_TOKEN_COUNT", {"X_TOKEN_COUNT": "hunter2"})
    assert "hunter2" not in str(exc.value) and "X_TOKEN_COUNT must be an integer" in str(exc.value)


def test_undeclared_product_variables_are_refused_with_the_closest_declared_name():
    found = config.problems({"GROUNDED_EMBEDER": "hash", "GROUNDED_ZZZ": "1", "UNRELATED": "x", "GROUNDED_EMBEDDER": "hash"})
    assert found == ["unknown setting GROUNDED_EMBEDER (did you mean GROUNDED_EMBEDDER?)",
                     "unknown setting GROUNDED_ZZZ (see python -m tenants.conf.docs --list)"]
    with pytest.raises(ConfigError, match="GROUNDED_EMBEDER.*GROUNDED_ZZZ"):
        config.check_environment({"GROUNDED_EMBEDER": "hash", "GROUNDED_ZZZ": "1"})
    config.check_environment({"GROUNDED_EMBEDDER": "hash", "UNRELATED": "x"})


def test_reading_an_undeclared_name_or_the_wrong_type_is_a_programming_error():
    with pytest.raises(KeyError):
        config.get("GROUNDED_NOT_DECLARED", {})
    with pytest.raises(TypeError, match="GROUNDED_EMBED_BATCH is declared as int"):
        config.get_str("GROUNDED_EMBED_BATCH", {})


def test_every_setting_is_declared_once_with_a_doc_and_a_default_of_its_type():
    names = [s.name for s in config.DECLARED]
    assert len(names) == len(set(names))
    for setting in config.DECLARED:
        assert setting.doc and "\n" not in setting.doc and "|" not in setting.doc, setting.name
        assert setting.read_by in {"product", "scripts", "tests"}, setting.name
        value = config.get(setting.name, {})
        assert isinstance(value, setting.type), setting.name
        if setting.choices:
            assert value in setting.choices, setting.name
