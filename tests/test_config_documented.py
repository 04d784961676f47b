"""tenants/conf/environment.py is the one place configuration is declared (issue 30): the README's and
docs/configuration.md's tables are generated from it, code reads the environment only through it,
every declared setting is read by someone, and nothing we ship or run sets a GROUNDED_* name it
does not declare (start-up would refuse it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tenants.conf import docs as config_docs
from tenants.conf import environment as config
from tenants.conf import product as product_conf

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "api", "kb", "tenants")
# A raw read of the environment: os.environ.get("X"), os.getenv("X"), os.environ["X"] (not a write: setdefault, = ...).
RAW_READ = re.compile(r"""(?:environ\.get|getenv)\(\s*["']([A-Z][A-Z0-9_]+)["']|environ\[\s*["']([A-Z][A-Z0-9_]+)["']\](?!\s*=[^=])""")
# A read through the accessor: get("X"), get_int("X"), config.get_str("X") ...
ACCESSOR_READ = re.compile(r"""(?:(?<![\w.])|\bconfig\.)get(?:_str|_int|_float|_bool|_list)?\(\s*["']([A-Z][A-Z0-9_]+)["']""")
# A read of a product setting (tenants/conf/product.py): product_settings.X, or a tunable's name in quotes (kb/retrieval/tunables.py).
PRODUCT_READ = re.compile(r"""\bproduct_settings\.([A-Z][A-Z0-9_]+)\b|["']([A-Z][A-Z0-9_]+)["']""")
SHELL_READ = re.compile(r"\$\{([A-Z][A-Z0-9_]+)")
PRODUCT_NAME = re.compile(r"\bGROUNDED_[A-Z0-9_]*[A-Z0-9]\b")
# Raw reads still to move to tenants.conf.environment, each with its reason. The test fails when one goes, too.
KNOWN_RAW_READS: dict[tuple[str, str], str] = {}  # (file, name) -> why it must read os.environ itself
# Set for third-party code, not read by ours.
THIRD_PARTY = {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "DJANGO_SETTINGS_MODULE",
               "CMAKE_ARGS"}  # CMAKE_ARGS: llama-cpp-python's build flags (scripts/real_model_check)
# Files that name undeclared GROUNDED_* variables on purpose (to show they are refused).
DELIBERATELY_UNDECLARED = {"tests/test_config.py", "tests/test_deployment_config.py", "docs/configuration.md"}


def _python_files(*folders: str) -> list[Path]:
    return [path for folder in folders for path in (ROOT / folder).rglob("*.py")]


def _product_settings_read() -> set[str]:
    """The product settings the apps read (outside tenants/conf, which declares them)."""
    names = set()
    for path in _python_files(*PACKAGES):
        if path.relative_to(ROOT).parts[:2] != ("tenants", "conf"):
            names |= {a or b for a, b in PRODUCT_READ.findall(path.read_text())}
    return names & set(product_conf.DECLARED)


def _scripts() -> list[Path]:
    return [p for p in (ROOT / "scripts").iterdir() if p.is_file()] + [ROOT / ".ci" / "run"]


@pytest.mark.parametrize("path", list(config_docs.TARGETS))
def test_the_committed_tables_are_the_generated_ones(path):
    committed = config_docs.generated_block((ROOT / path).read_text(), path)
    assert committed == config_docs.render(config_docs.TARGETS[path]), (
        f"{path} differs from tenants/conf/environment.py: run `python -m tenants.conf.docs --write`")


def test_the_readme_table_lists_the_main_settings_and_links_into_docs():
    table = config_docs.generated_block((ROOT / "README.md").read_text(), "README.md")
    names = re.findall(r"^\| `([A-Z0-9_]+)`", table, re.M)
    assert names == [s.name for s in config.DECLARED if s.main] and "DATABASE_URL" in names
    for link in re.findall(r"\]\(([^)#]+)", table):
        assert (ROOT / link).exists(), link


def test_product_code_reads_the_environment_only_through_kb_config():
    raw = set()
    for path in _python_files(*PACKAGES):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "tenants/conf/environment.py":
            continue
        for match in RAW_READ.finditer(path.read_text()):
            raw.add((rel, match.group(1) or match.group(2)))
    assert raw == set(KNOWN_RAW_READS), f"read past tenants.conf.environment: {sorted(raw - set(KNOWN_RAW_READS))}; " \
                                        f"no longer raw (drop from KNOWN_RAW_READS): {sorted(set(KNOWN_RAW_READS) - raw)}"


def test_every_name_read_is_declared_and_every_declared_name_is_read_by_whom_it_says():
    product = {n for path in _python_files(*PACKAGES) for n in ACCESSOR_READ.findall(path.read_text())}
    product |= {product_conf.FROM_ENVIRONMENT[name] for name in _product_settings_read() if name in product_conf.FROM_ENVIRONMENT}
    product |= {name for _, name in KNOWN_RAW_READS}
    scripts = {n for path in _scripts() for n in SHELL_READ.findall(path.read_text())}
    tests = {n for path in _python_files("tests", "bench") for n in PRODUCT_NAME.findall(path.read_text())}
    declared = {s.name: s.read_by for s in config.DECLARED}
    assert not product - set(declared), f"read in code but not declared: {sorted(product - set(declared))}"
    script_locals = {"TMPDIR"}
    assert not scripts - set(declared) - script_locals, f"read by scripts, not declared: {sorted(scripts - set(declared) - script_locals)}"
    unread = {name for name, by in declared.items()
              if name not in {"product": product, "scripts": scripts, "tests": tests | scripts}[by]}
    assert not unread, f"declared but not read by whom tenants/conf/environment.py says (read_by): {sorted(unread)}"


def test_every_declared_product_setting_is_read_by_the_apps():
    unread = set(product_conf.DECLARED) - _product_settings_read()
    assert not unread, f"declared in tenants/conf/product.py but read by no app (as product_settings.NAME): {sorted(unread)}"


def test_scripts_tests_benches_and_docs_name_only_declared_grounded_variables():
    files = [*_scripts(), *_python_files("tests", "bench", *PACKAGES), ROOT / "docker-compose.yml", ROOT / "README.md",
             *(ROOT / "docs").glob("*.md")]
    undeclared = {}
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if rel in DELIBERATELY_UNDECLARED:
            continue
        for name in set(PRODUCT_NAME.findall(path.read_text())) - set(config.SETTINGS):
            undeclared.setdefault(name, []).append(rel)
    assert not undeclared, f"start-up refuses these undeclared names: {undeclared}"


def test_scripts_and_the_compose_file_set_only_declared_variables():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    set_names = set(compose["x-app"]["environment"])
    for path in _scripts():
        set_names |= set(re.findall(r"(?:^|[\s;(])(?:export\s+)?([A-Z][A-Z0-9_]+)=", path.read_text(), re.M))
        set_names |= set(re.findall(r"^export\s+(?:[A-Z][A-Z0-9_]+=\S*\s+)*([A-Z][A-Z0-9_]+)=", path.read_text(), re.M))
    script_locals = {"PY", "RV", "GGUF", "LOG", "SERVER", "PORT"}  # shell variables, not exported to the product
    assert not set_names - set(config.SETTINGS) - THIRD_PARTY - script_locals, sorted(
        set_names - set(config.SETTINGS) - THIRD_PARTY - script_locals)
