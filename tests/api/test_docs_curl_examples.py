"""docs/api.md's curl examples, run as written by real `curl` against a live server (issue 32).

Every ```bash block's `curl` command is an example; the comment line above it starts with the status it
documents (`# 201: ...`). The shell expands the documented variables ($GROUNDED, $KEY, $CORPUS, ...),
set here to a live server, tenant A's admin key and real ids. An example that deletes gets an object of
its own, so the order of the examples does not matter. Every route under /api/v1/ and each of its methods
must have an example: a new endpoint without one fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.urls import URLPattern, resolve

from api import urls as api_urls
from kb.models import Corpus, Document, IngestJob
from kb.sources.models import Source
from tenants.scope import activate
from tests.api.conftest import ingest, issue
from tests.factories import make_corpus, make_membership, whole_tenant
from tests.kb import _transactional  # noqa: F401  (flush transactional tests as owner)
from tests.kb.sources.conftest import grant

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "owner"])

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
METHODS = ("get", "post", "put", "patch", "delete")
STATUS_COMMENT = re.compile(r"#\s*(\d{3})\b")


@dataclass(frozen=True)
class Example:
    line: int  # in docs/api.md, 1-based
    command: str  # the shell text, continuation lines included
    status: int | None  # documented in the comment above; None if missing

    @property
    def tokens(self) -> list[str]:
        return shlex.split(self.command.replace("\\\n", " "))

    @property
    def method(self) -> str:
        tokens = self.tokens
        if "-X" in tokens:
            return tokens[tokens.index("-X") + 1].upper()
        return "POST" if {"-d", "--data", "-F", "--form", "--json"} & set(tokens) else "GET"

    @property
    def path(self) -> str:
        """The URL's path with every $VARIABLE read as an id (for resolving the route)."""
        url = next(t for t in self.tokens if t.startswith("$GROUNDED"))
        return re.sub(r"\$[A-Z_]+", "1", url.removeprefix("$GROUNDED").split("?")[0])

    @property
    def route(self) -> tuple[str, str]:
        return resolve(self.path).url_name, self.method


def doc_examples(text: str) -> list[Example]:
    """The curl commands of the ```bash blocks, each with the status of the `# NNN` comment above it."""
    found: list[Example] = []
    in_bash, status = False, None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_bash, status = line.strip() == "```bash", None
        elif in_bash and line.lstrip().startswith("#"):
            match = STATUS_COMMENT.match(line.lstrip())
            status = int(match.group(1)) if match else status
        elif in_bash and line.lstrip().startswith("curl "):
            start, command = i, [line]
            while command[-1].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                command.append(lines[i])
            found.append(Example(line=start + 1, command="\n".join(command), status=status))
            status = None
        i += 1
    return found


def api_routes() -> set[tuple[str, str]]:
    """(route name, METHOD) of every endpoint under /api/v1/."""
    routes = set()
    for pattern in api_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        view = pattern.callback.view_class
        routes |= {(pattern.name, m.upper()) for m in METHODS if hasattr(view, m)}
    return routes


EXAMPLES = doc_examples(DOC.read_text())


def test_the_parser_reads_commands_statuses_methods_and_routes():
    text = ("```bash\n# 201: made\ncurl -H 'A: b' \\\n  -d '{\"x\": '$CORPUS'}' $GROUNDED/api/v1/corpora/\n"
            "curl $GROUNDED/api/v1/jobs/$JOB/\n```\n")
    made, bare = doc_examples(text)
    assert (made.line, made.status, made.route) == (3, 201, ("corpus-list", "POST"))
    assert (bare.status, bare.route) == (None, ("job-detail", "GET"))
    assert doc_examples("```sh\ncurl $GROUNDED/api/v1/jobs/\n```\n") == []  # only bash blocks are examples


def test_every_example_states_its_status_and_every_endpoint_has_one():
    assert len(EXAMPLES) > 40
    assert [e.line for e in EXAMPLES if e.status is None] == [], "a curl example without a '# <status>' comment above it"
    covered = {e.route for e in EXAMPLES if e.path.startswith("/api/v1/")}
    missing = sorted(api_routes() - covered)
    assert missing == [], f"endpoints with no curl example in docs/api.md: {missing}"


@pytest.fixture
def doc_env(world, live_server, settings, tmp_path) -> dict[str, str]:
    """The documented variables, pointing at a live server and tenant A's objects; a file to upload."""
    settings.RATE_LIMIT_PER_MINUTE = 10_000
    settings.SOURCES_FOLDER_ROOTS = ["/srv/policies"]
    grant(world.a, "folder", "/srv/policies")  # an operator's grant (manage.py grant_source)
    admin = world.client("a-admin")
    run = admin.post("/api/v1/ask/", {"question": "How much may I spend on hotels per night?"}, format="json").json()
    conversation = admin.post("/api/v1/conversations/", {"title": "Travel"}, format="json").json()
    scope = whole_tenant(world.a)
    with activate(scope):
        doc = Document.objects.for_scope(scope).get(corpus=world.shared)
        job = IngestJob.objects.for_scope(scope).filter(document=doc).first()
        source = Source.objects.create(tenant_id=world.a.id, corpus=world.shared, name="Shared folder", kind="folder",
                                       config={"path": "/srv/policies/shared"}, schedule_minutes=0)
    from django.contrib.auth import get_user_model

    member = make_membership(get_user_model().objects.create(username="docs-reader"), world.a, "reader")
    (tmp_path / "travel-policy.md").write_text("# Travel policy\n\nHotels: up to 150 EUR per night.\n")
    return {"GROUNDED": live_server.url, "KEY": world.keys["a-admin"], "CORPUS": str(world.shared.id), "DOC": str(doc.id),
            "JOB": str(job.id), "RUN": str(run["id"]), "CONVERSATION": str(conversation["id"]), "SOURCE": str(source.id),
            "KEY_ID": str(_key_id(world, issue(world.a, "reader"))), "MEMBER": str(member.id)}


def _key_id(world, raw: str) -> int:
    from tenants.principals import authenticate_key

    return authenticate_key(raw)[0].id


def throwaways(world, env: dict[str, str]) -> dict[tuple[str, str], dict[str, str]]:
    """For each example that deletes (or re-embeds), an object of its own, so no other example loses its."""
    admin = world.client("a-admin")
    corpus = make_corpus(world.a, "to delete")
    ingest(corpus, "Old handbook", "Superseded.")
    ingest(world.shared, "Old memo", "Superseded.")
    scope = whole_tenant(world.a)
    with activate(scope):
        empty = Corpus.objects.create(tenant=world.a, name="to re-embed", embedding_model="hash", embedding_dim=64)
        doc = Document.objects.for_scope(scope).get(corpus=world.shared, title="Old memo")
        source = Source.objects.create(tenant_id=world.a.id, corpus=world.shared, name="Old share", kind="folder",
                                       config={"path": "/srv/policies/old"}, schedule_minutes=0)
    from django.contrib.auth import get_user_model

    member = make_membership(get_user_model().objects.create(username="docs-leaver"), world.a, "reader")
    conversation = admin.post("/api/v1/conversations/", {"title": "Old"}, format="json").json()
    return {("corpus-detail", "DELETE"): {"CORPUS": str(corpus.id)}, ("corpus-reembed", "POST"): {"CORPUS": str(empty.id)},
            ("document-detail", "DELETE"): {"DOC": str(doc.id)}, ("source-detail", "DELETE"): {"SOURCE": str(source.id)},
            ("key-detail", "DELETE"): {"KEY_ID": str(_key_id(world, issue(world.a, "reader")))},
            ("member-detail", "DELETE"): {"MEMBER": str(member.id)},
            ("conversation-detail", "DELETE"): {"CONVERSATION": str(conversation["id"])}}


def run_curl(example: Example, env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """The example's own text run by bash and curl, with the status code written after the body."""
    shell_env = {"PATH": os.environ["PATH"], "HOME": str(cwd), **env}  # HOME: no ~/.curlrc of anyone's
    done = subprocess.run(["bash", "-c", example.command.rstrip() + " -sS -w '\\n%{http_code}'"], env=shell_env, cwd=cwd,
                          capture_output=True, text=True, timeout=180)
    body, _, code = done.stdout.rpartition("\n")
    assert code.isdigit(), (example.line, done.stdout[-300:], done.stderr[-300:])
    return int(code), body


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl binary (apt-get install curl)")
def test_every_curl_example_answers_its_documented_status(world, doc_env, tmp_path):
    own = throwaways(world, doc_env)
    wrong = []
    for example in EXAMPLES:
        code, body = run_curl(example, {**doc_env, **own.get(example.route, {})}, tmp_path)
        if code != example.status:
            wrong.append(f"docs/api.md:{example.line} {example.method} {example.path}: {code}, documented {example.status}: {body[:300]}")
    assert wrong == [], "\n".join(wrong)
    # The examples really acted: the upload landed, the downloaded file is the original, the delete took.
    assert "150 EUR per night" in (tmp_path / "Travel policy.md").read_text()  # curl -OJ: the name it was uploaded as
    scope = whole_tenant(world.a)
    with activate(scope):
        assert Document.objects.for_scope(scope).filter(source_name="travel-policy.md").exists()
        assert not Document.objects.for_scope(scope).filter(id=own[("document-detail", "DELETE")]["DOC"]).exists()


def test_a_wrong_status_is_caught(world, doc_env, tmp_path):
    """The runner reads the real status: a documented 200 without a key answers 401."""
    example = doc_examples("```bash\n# 200\ncurl -H \"Authorization: Bearer $KEY\" $GROUNDED/api/v1/corpora/\n```\n")[0]
    assert run_curl(example, {**doc_env, "KEY": "gk_wrong_key"}, tmp_path)[0] == 401
    assert run_curl(example, doc_env, tmp_path)[0] == 200
