"""docs/api.md's walkthrough, pasted top to bottom into bash against a fresh server (issue 52).

The page's ```bash blocks are the walkthrough (```sh blocks, such as the BASE/KEY preamble and the
operators' commands, are not run). An example is a comment `# NNN...` (the HTTP status it documents)
and the lines under it, up to the next such comment or the end of its block. The whole page runs as
ONE bash script, in order and verbatim: every line outside a bash block is blanked, so line N of the
script is line N of the page. `curl` is a bash function (from BASH_ENV, read before the script) that
runs the real curl and records, for every request, the page line of the top-level command that made
it (a helper the page defines, like `wait_for_job`, counts at the line that calls it), the method,
the URL, the status and curl's exit code. The test then checks that every request answered the
status its example documents, that every example made a request and no request came from outside an
example, that every route under /api/v1/ and each of its methods was requested, and that the page
kept its promises: the demo's corpora and documents and the reader's own key are as they were, and
what the walkthrough made is gone.

The server is pytest-django's live_server on a fresh database, with the demo tenant (agents.demo)
and the keys `manage.py create_tenant_admin --tenant kestrel --key-role admin --key-role reader`
prints, as scripts/run loads and prints them; BASE and KEY are set as the page's preamble says.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.db.models import Count
from django.urls import URLPattern, resolve

from agents.demo import TENANT_SLUG, load_demo
from api import urls as api_urls
from kb.models import Corpus, Document
from kb.sources.models import Source
from tenants.models import ApiKey, Membership, Tenant
from tenants.principals import authenticate_key
from tenants.scope import Scope, activate
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
METHODS = ("get", "post", "put", "patch", "delete")
STATUS_COMMENT = re.compile(r"\s*#\s*(\d{3})\b")
# The curl the page calls: the real one, recording each request (see the module's docstring).
CURL_WRAPPER = r"""
curl() {
  local here=${BASH_LINENO[${#BASH_LINENO[@]}-2]} err rc
  err=$(mktemp)
  command curl "$@" -w '%{stderr}%{method} %{http_code} %{url_effective}\n' 2>"$err"
  rc=$?
  printf '%s %s %s\n' "$here" "$rc" "$(tail -n 1 "$err")" >>"$WALKTHROUGH_LOG"
  head -n -1 "$err" >&2
  rm -f "$err"
  return $rc
}
"""


@dataclass(frozen=True)
class Example:
    first: int  # page lines (1-based) of its status comment ...
    last: int  # ... and of its last line
    status: int


@dataclass(frozen=True)
class Request:
    line: int  # the page line of the top-level command that made it
    exit_code: int  # curl's
    method: str
    status: int
    url: str


def walkthrough(text: str) -> tuple[str, list[Example]]:
    """The page as a bash script (lines outside ```bash blocks blanked) and its examples."""
    script: list[str] = []
    examples: list[Example] = []
    in_bash, open_example = False, None
    for number, line in enumerate(text.splitlines(), start=1):
        fence = line.strip().startswith("```")
        if fence:
            if in_bash and open_example is not None:
                examples.append(Example(open_example[0], number - 1, open_example[1]))
            in_bash, open_example = (not in_bash and line.strip() == "```bash"), None
        elif in_bash and (match := STATUS_COMMENT.match(line)):
            if open_example is not None:
                examples.append(Example(open_example[0], number - 1, open_example[1]))
            open_example = (number, int(match.group(1)))
        script.append(line if in_bash and not fence else "")
    return "\n".join(script) + "\n", examples


def run_page(text: str, env: dict[str, str], cwd: Path) -> tuple[list[Request], subprocess.CompletedProcess]:
    """Run the page's bash blocks as one script in a fresh bash (no profile, no rc, no ~/.curlrc) in `cwd`
    (made if missing; the script's output is kept there, in walkthrough.out and walkthrough.err)."""
    cwd.mkdir(parents=True, exist_ok=True)
    script, log, wrapper = cwd / "walkthrough.sh", cwd / "requests.log", cwd / "curl-wrapper.sh"
    script.write_text(walkthrough(text)[0])
    wrapper.write_text(CURL_WRAPPER)
    log.write_text("")
    shell_env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "TMPDIR": str(cwd), "BASH_ENV": str(wrapper),
                 "WALKTHROUGH_LOG": str(log), **env}
    done = subprocess.run(["bash", "--noprofile", "--norc", str(script)], env=shell_env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    (cwd / "walkthrough.out").write_text(done.stdout)
    (cwd / "walkthrough.err").write_text(done.stderr)
    requests = []
    for row in log.read_text().splitlines():
        line, exit_code, method, status, url = (row.split(" ", 4) + ["", "", ""])[:5]
        requests.append(Request(int(line), int(exit_code), method, int(status) if status.isdigit() else 0, url))
    return requests, done


def problems(examples: list[Example], requests: list[Request]) -> list[str]:
    """Every way the run differs from the page: a status other than the documented one, a failed curl,
    an example that made no request, a request outside every example."""
    found = []
    for example in examples:
        made = [r for r in requests if example.first <= r.line <= example.last]
        if not made:
            found.append(f"docs/api.md:{example.first}: documents {example.status} but made no request")
        found += [f"docs/api.md:{r.line}: {r.method} {r.url} answered {r.status}, documented {example.status}"
                  for r in made if r.status != example.status]
    found += [f"docs/api.md:{r.line}: {r.method} {r.url}: curl exited {r.exit_code}" for r in requests if r.exit_code]
    found += [f"docs/api.md:{r.line}: {r.method} {r.url} is outside every example (no '# <status>' comment above it)"
              for r in requests if not any(e.first <= r.line <= e.last for e in examples)]
    return found


def api_routes() -> set[tuple[str | None, str]]:
    """(route name, METHOD) of every endpoint under /api/v1/."""
    routes = set()
    for pattern in api_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        view = getattr(pattern.callback, "view_class")  # noqa: B009  (an attribute of DRF's as_view(), unknown to the stubs)
        routes |= {(pattern.name, m.upper()) for m in METHODS if hasattr(view, m)}
    return routes


def test_the_page_reads_as_one_script_whose_lines_are_the_pages():
    text = ("intro\n```sh\nexport KEY=gk_...\n```\n```bash\nhelper() { :; }\n# 201: made\nX=$(curl -d '{}' \\\n"
            "  $BASE/a | jq .id)\n# not a status\necho $X\n# 200\ncurl $BASE/b\n```\n```bash\n# 204\ncurl -X DELETE $BASE/c\n```\n")
    script, examples = walkthrough(text)
    assert script.splitlines()[5] == "helper() { :; }" and script.splitlines()[2] == ""  # sh blocks are not run
    assert len(script.splitlines()) == len(text.splitlines())
    assert examples == [Example(7, 11, 201), Example(12, 13, 200), Example(16, 17, 204)]
    requests = [Request(9, 0, "POST", 201, "a"), Request(13, 0, "GET", 404, "b"), Request(6, 0, "GET", 200, "h")]
    assert problems(examples, requests) == [
        "docs/api.md:13: GET b answered 404, documented 200",
        "docs/api.md:16: documents 204 but made no request",
        "docs/api.md:6: GET h is outside every example (no '# <status>' comment above it)"]


def _demo_state(tenant: Tenant) -> dict[str, int]:
    scope = Scope.system(tenant.id)
    with activate(scope):
        return dict(Corpus.objects.for_scope(scope).annotate(n=Count("documents")).values_list("name", "n"))


@pytest.fixture
def demo_server(live_server, tmp_path) -> dict[str, str]:
    """A fresh server with the demo loaded and BASE and KEY as scripts/run prints them."""
    load_demo(wait_seconds=120, log=lambda line: None)
    printed = io.StringIO()
    call_command("create_tenant_admin", tenant=TENANT_SLUG, username="admin", key_roles=["admin", "reader"], stdout=printed)
    keys = dict(re.findall(r"^API key, role (\w+) .*: (gk_\S+)$", printed.getvalue(), re.M))
    assert set(keys) == {"admin", "reader"}, printed.getvalue()
    return {"BASE": live_server.url, "KEY": keys["admin"], "READER_KEY": keys["reader"]}


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("jq") is None, reason="needs curl and jq")
def test_the_walkthrough_answers_every_documented_status_and_leaves_the_readers_things_alone(demo_server, tmp_path, settings):
    tenant = Tenant.objects.using("owner").get(slug=TENANT_SLUG)
    before = _demo_state(tenant)
    text = DOC.read_text()
    _, examples = walkthrough(text)
    assert len(examples) > 50, "the walkthrough lost its examples"
    env = {"BASE": demo_server["BASE"], "KEY": demo_server["KEY"]}
    requests, done = run_page(text, env, tmp_path / "first")
    wrong = problems(examples, requests)
    assert wrong == [], "\n".join(wrong) + f"\n--- stderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, done.stderr[-3000:]
    assert "command not found" not in done.stderr and "parse error" not in done.stderr, done.stderr[-3000:]
    # Pasted a second time into the same server, it answers the same: it left nothing in its own way.
    # One paste fits in the default per-key limit (it just ran under it); two in one minute with one key
    # do not, and a 429 is not what this second paste checks.
    settings.RATE_LIMIT_PER_MINUTE = 100_000
    again, done_again = run_page(text, env, tmp_path / "again")
    assert problems(examples, again) == [], done_again.stderr[-3000:]
    assert {(r.line, r.status) for r in again} == {(r.line, r.status) for r in requests}

    covered = set()
    for r in requests:
        path = urlsplit(r.url).path
        if path.startswith("/api/v1/"):
            covered.add((resolve(path).url_name, r.method))
    missing = sorted(api_routes() - covered)
    assert missing == [], f"endpoints the walkthrough never calls: {missing}"

    # The reader's things are as they were: the demo's corpora and documents, the keys scripts/run printed.
    assert _demo_state(tenant) == before
    assert authenticate_key(demo_server["KEY"]) is not None and authenticate_key(demo_server["READER_KEY"]) is not None
    # What the walkthrough made is gone (keys revoked: their rows stay for the audit trail).
    scope = Scope.system(tenant.id)
    with activate(scope):
        assert not Document.objects.for_scope(scope).filter(source_name="travel-policy.md").exists()
        assert not Source.objects.for_scope(scope).exists()
        assert not Corpus.objects.for_scope(scope).filter(name="Walkthrough handbook").exists()
        made_keys = ApiKey.objects.filter(tenant=tenant, name__in=["Sales bot", "Walkthrough admin"])
        assert made_keys.count() == 4 and not any(k.is_active for k in made_keys)  # two per run
        assert not Membership.objects.filter(tenant=tenant, user__username__startswith="alice").exists()
    # The upload was the page's own file, downloaded again under the name it was uploaded as.
    uploaded = list(tmp_path.rglob("policies/travel-policy.md"))
    assert len(uploaded) == 2  # one scratch folder per run
    for original in uploaded:
        assert (original.parent.parent / "travel-policy.md").read_text() == original.read_text()


@pytest.mark.django_db(transaction=True, databases=["default", "owner"])
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_changed_status_is_caught_by_the_real_run(live_server, tmp_path):
    """The runner reads the status the server really answers: a page documenting 200 for a request
    without a key is told it answered 401, at its line, and a helper's request counts at its caller."""
    page = ("```bash\nask() { curl -sS -o /dev/null \"$BASE/api/v1/corpora/\"; }\n```\n\n"
            "```bash\n# 200: documented wrongly\ncurl -sS -o /dev/null \"$BASE/api/v1/corpora/\"\n# 401\nask\n```\n")
    requests, done = run_page(page, {"BASE": live_server.url}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert [(r.line, r.status) for r in requests] == [(7, 401), (9, 401)]
    assert problems(walkthrough(page)[1], requests) == [
        f"docs/api.md:7: GET {live_server.url}/api/v1/corpora/ answered 401, documented 200"]
