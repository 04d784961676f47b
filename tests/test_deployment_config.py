"""Configuration: bad settings fail with one clear line; compose file is valid; deploy checks pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PROD_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "k" * 64 + "-production-like-secret-for-checks",
    "ALLOWED_HOSTS": "kb.example.com",
    "DATABASE_URL": "postgres://grounded:pw@db.example.com:5432/grounded",
}


def run_manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DEBUG", "SECRET_KEY", "REDIS_URL"}}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("env", "needle"), [
    ({"DATABASE_URL": "mysql://nope", "SECRET_KEY": "x" * 60}, "DATABASE_URL"),
    ({"DATABASE_URL": "postgres://u:p@host:notaport/db", "SECRET_KEY": "x" * 60}, "DATABASE_URL"),
    ({"DEBUG": "0"}, "SECRET_KEY"),
    ({"DEBUG": "maybe"}, "DEBUG"),
    ({"REDIS_URL": "http://wrong", "DEBUG": "1"}, "REDIS_URL"),
    # Declared in tenants/conf/environment.py: a value that does not parse, a GROUNDED_* name nothing declares (the closest is named).
    ({"GROUNDED_EMBED_BATCH": "abc"}, "GROUNDED_EMBED_BATCH must be an integer, got 'abc'"),
    ({"GROUNDED_EMBEDER": "hash"}, "unknown setting GROUNDED_EMBEDER (did you mean GROUNDED_EMBEDDER?)"),
])
def test_bad_configuration_fails_with_one_line_naming_the_setting(env, needle):
    result = run_manage("check", env=env)
    assert result.returncode != 0
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]


def _gunicorn_check_config(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDED_") or k == "GROUNDED_DATA_DIR"}
    return subprocess.run([str(Path(sys.executable).parent / "gunicorn"), "--check-config", "-c", "python:api.project.gunicorn_conf",
                           "api.project.wsgi:application"], cwd=ROOT, capture_output=True, text=True, timeout=120, env={**base, **env})


def test_gunicorn_loads_its_config_and_refuses_a_bad_or_unknown_variable():
    assert _gunicorn_check_config().returncode == 0  # every global of api/project/gunicorn_conf.py is a valid gunicorn setting
    result = _gunicorn_check_config(GUNICORN_THREADS="many", GROUNDED_WARMUPS="0")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: unknown setting GROUNDED_WARMUPS (did you mean GROUNDED_WARMUP?); GUNICORN_THREADS must be an integer, got 'many'")


def test_check_deploy_is_clean_with_production_settings():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=PROD_ENV)
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_is_valid_and_has_the_production_shape():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker"} <= set(services)
    assert services["postgres"]["image"].startswith("pgvector/pgvector")
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in services[name], name
    assert "gunicorn" in services["web"]["command"]
    assert services["worker"]["command"][:3] == ["celery", "-A", "api.project"]
    env = services["web"]["environment"]
    assert env["DATABASE_URL"].startswith("postgres://") and "REDIS_URL" in env and "SECRET_KEY" in env
    # One database-wall key for every container (a key file each would sign proofs the database refuses).
    assert env["DATABASE_WALL_KEY"].startswith("${DATABASE_WALL_KEY:?")
    # Chain digests: one signing key, written to a volume every service mounts (beat writes, any verifies).
    assert env["CHAIN_SIGNING_KEY"].startswith("${CHAIN_SIGNING_KEY:?")
    for name in ("web", "worker", "beat", "migrate"):
        assert f"digests:{env['CHAIN_DIGEST_DIR']}" in services[name]["volumes"], name
    assert set(compose["volumes"]) >= {"pgdata", "digests"}


def test_the_citus_profile_is_a_coordinator_two_workers_and_a_setup_that_distributes():
    """docker-compose's `citus` profile (docs/scaling.md). Docker does not run here, so this reads the file:
    the shape, the pinned official image, the two settings the product needs from Citus, and a setup that
    registers the workers, migrates, then applies `distribution_check --sql` and checks again."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    citus = {name: s for name, s in services.items() if "citus" in s.get("profiles", [])}
    assert set(citus) == {"citus-coordinator", "citus-worker-1", "citus-worker-2", "citus-setup"}
    # The rest as before, but for the streaming standby of the `replica` profile (docs/replicas.md).
    assert [name for name, s in services.items() if name not in citus and "profiles" in s] == ["postgres-replica"]
    for name in ("citus-coordinator", "citus-worker-1", "citus-worker-2"):
        node = citus[name]
        base = re.search(r"^FROM (\S+)$", node["build"]["dockerfile_inline"], re.M).group(1)
        assert re.fullmatch(r"citusdata/citus:\d+\.\d+\.\d+", base), base  # the official image, a pinned version
        assert "postgresql-17-pgvector" in node["build"]["dockerfile_inline"]
        assert {"citus.propagate_set_commands=local", "citus.enable_unsafe_triggers=on"} <= set(node["command"])
        assert "healthcheck" in node and f"{name}:/var/lib/postgresql/data" in node["volumes"]
        assert name in compose["volumes"]
    setup = citus["citus-setup"]
    assert setup["image"] == services["web"]["image"] and setup["restart"] == "no"
    assert setup["environment"]["DATABASE_URL"].endswith("@citus-coordinator:5432/grounded")
    assert {dep: c["condition"] for dep, c in setup["depends_on"].items()} == {
        n: "service_healthy" for n in ("citus-coordinator", "citus-worker-1", "citus-worker-2")}
    script = setup["command"][-1]
    steps = [script.index(s) for s in ("citus_add_node", "manage.py migrate", "distribution_check --sql > ",
                                       "< /tmp/distribute.sql", "manage.py distribution_check\n")]
    assert steps == sorted(steps), script
    assert "-ec" in setup["command"]  # a failing step (a rule broken: distribution_check exits 1) stops the setup
    # The app reaches the cluster by DB_HOST; without it, the single node as before.
    assert "@${DB_HOST:-postgres}:5432/" in services["web"]["environment"]["DATABASE_URL"]
