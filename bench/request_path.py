"""The request path of one question: which project files a `POST /api/v1/ask/` passes through.

    .venv/bin/python bench/request_path.py [--question "..."] [--strategy auto] [--embedder hash]
                                           [--relevance none] [--calls] [--keep-db] [--worker-warm-up]

Creates its own database (request_path_<pid>, dropped after), one tenant with one corpus holding the
demo policies (kb/demo/*.md, ingested through kb.ingest like an upload) and a reader API key, asks one
warm-up question (so imports, per-process caches and the side connections of hybrid searches are made,
as a warmed-up server has them), then asks the measured question through Django's
test client while sys.setprofile / threading.setprofile record every Python function call (on the
side-connection worker threads too, set there before the request).

Definitions (what the figures count):

- project file: a file under tenants/, kb/, agents/ or api/ of this repository, migrations excluded.
  Only function calls count: module bodies (`<module>`, imports) are skipped.
- (a) files: the distinct project files whose functions run during the request, in the order they were
  first entered; (b) their count. Package: a file's directory (kb/retrieval, kb, agents/providers, ...).
  A package boundary crossing: a call whose nearest calling project frame (the caller, skipping
  Django/DRF/library frames between them) is in another package; the figures given are the distinct
  packages, the distinct (caller package -> callee package) pairs and the number of such calls.
- (c) kb/retrieval, per search: a search is one call of the public entry `kb.retrieval.search` on the
  request's thread, with everything run on other threads meanwhile on behalf of it. Per thread, a
  module (file) of kb/retrieval is *entered* when a function of it is called from a frame of a
  different file while no frame of that module is on the thread's stack (a call back into a module
  whose function is still running, e.g. the search entry's statement runner used by a stage, is not
  an entry: the path never left it). A module *entered twice* is entered again after the path left
  it (every frame of it had returned). The module entries are printed in order, per thread; the
  request's own thread is `main`. A search entered from outside kb/retrieval counts its first
  module as entered once.
- (d) the hand-off path. A file is *entered from* another project file when one of its functions is
  called with the nearest calling project frame (as for crossings: Django/DRF/library frames between
  are skipped) in a different file; it *calls into* another project file when it is that caller. A
  hand-off file is both (it passes the request on), a leaf is entered from another project file and
  never calls into one; an edge file is never entered from a project file (Django, DRF or a worker
  thread calls it: the view's entry, middleware, a side-connection task). A lambda, generator
  expression or comprehension run by another file (`key=lambda ...` given to a sort, a generator
  handed to a function) is a callback of the file that wrote it, not a hand-off: those frames
  (names in <...>) are not counted as entries here. Printed in first-entered order with their
  counts, the hand-off files with the files they call into.
- (e) infrastructure: the files under kb/embedded/ (the embedded database engine and server) entered
  during the request, each call with its thread and the frames that led to it (library frames
  included, up to the nearest project frame), plus every new database connection opened during the
  request (Django's `connect`, per thread and alias), the connection settings (CONN_MAX_AGE,
  CONN_HEALTH_CHECKS), whether `close_old_connections` ran during the request, and which threads had
  a connection open before it. The engine is entered only to open a connection
  (`DatabaseWrapper.get_connection_params`, which asks `ensure_server` for the socket).

Nothing is written to the repository.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchdb import create_database, drop_database  # noqa: E402  (bench/ is on sys.path when run as a script)

PACKAGES = ("tenants", "kb", "agents", "api")
RETRIEVAL = "kb/retrieval"
INFRASTRUCTURE = "kb/embedded/"  # the embedded database engine and server: entered to open a connection
CHAIN_FRAMES = 6  # library frames shown per infrastructure call (the nearest ones)
QUESTION = "How much can I spend on a hotel per night when travelling?"
WARM_UP = "How many days of annual leave do employees get?"


def settings_module() -> str:
    """The project's settings module (api/project since issue 49, kb/project before)."""
    for name in ("api.project.settings", "kb.project.settings"):
        if (ROOT / (name.replace(".", "/") + ".py")).exists():
            return name
    raise SystemExit("no settings module found")


def project_file(filename: str) -> str | None:
    """`filename` relative to the repository when it is a project file (see the module docstring), else None."""
    if not filename.startswith(str(ROOT) + os.sep):
        return None
    rel = filename[len(str(ROOT)) + 1:].replace(os.sep, "/")
    if rel.split("/", 1)[0] not in PACKAGES or "/migrations/" in rel:
        return None
    return rel


def package(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else rel


@dataclass
class Search:
    """One call of kb.retrieval.search: module entries per thread, in order."""

    entries: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    repeated: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


class Tracer:
    """The profile function: files in first-entered order, package crossings, kb/retrieval entries per search,
    project file -> project file calls (hand-offs), infrastructure calls and the watched library functions."""

    def __init__(self, search_code, watched: dict | None = None) -> None:
        self.search_code = search_code
        self.watched: dict = watched or {}  # library code object -> label: connections opened, closed per request
        self.watched_calls: Counter[tuple[str, str, str]] = Counter()  # (label, thread, alias)
        self.handoffs: Counter[tuple[str, str]] = Counter()  # (caller file, callee file), different files
        self.infra: Counter[tuple[str, str, str, tuple[str, ...]]] = Counter()  # (thread, file, function, frames)
        self.from_outside: set[str] = set()  # files entered with no project frame calling (Django, DRF, a thread)
        self.files: dict[str, None] = {}
        self.calls: Counter[str] = Counter()
        self.crossings: Counter[tuple[str, str]] = Counter()
        self.searches: list[Search] = []
        self.main = threading.get_ident()
        self.current: Search | None = None  # the search the request's thread is inside of
        self.depth = 0  # frames of the search entry on the request's thread (a retry calls it again inside)
        self.entered: dict[int, Counter[str]] = defaultdict(Counter)  # thread -> module -> entries this search
        self.names: dict[int, str] = {}
        self.cache: dict[str, str | None] = {}
        self.active = False  # only the measured request is recorded

    def rel(self, frame) -> str | None:
        name = frame.f_code.co_filename
        rel = self.cache.get(name, "")
        if rel == "":
            rel = self.cache[name] = project_file(name)
        return rel

    def caller(self, frame) -> str | None:
        """The file of the nearest calling project frame."""
        f = frame.f_back
        while f is not None:
            rel = self.rel(f)
            if rel is not None:
                return rel
            f = f.f_back
        return None

    def chain(self, frame) -> tuple[str, ...]:
        """The frames that called `frame`, nearest first: library ones as `module:function` (the nearest
        CHAIN_FRAMES of them), ending with the nearest project frame as `file:function`."""
        out: list[str] = []
        f = frame.f_back
        while f is not None:
            rel = self.rel(f)
            if rel is not None:
                return (*out[:CHAIN_FRAMES], *(["..."] if len(out) > CHAIN_FRAMES else []), f"{rel}:{f.f_code.co_name}")
            name = f.f_code.co_filename
            short = name.split("site-packages" + os.sep, 1)[-1] if "site-packages" in name else os.path.basename(name)
            out.append(f"{short.removesuffix('.py').replace(os.sep, '.')}:{f.f_code.co_name}")
            f = f.f_back
        return (*out[:CHAIN_FRAMES], *(["..."] if len(out) > CHAIN_FRAMES else []), "(no project frame)")

    def on_stack(self, frame, rel: str) -> bool:
        f = frame.f_back
        while f is not None:
            if f.f_code.co_filename == frame.f_code.co_filename:
                return True
            f = f.f_back
        return False

    def __call__(self, frame, event: str, arg) -> None:
        if event == "return" and frame.f_code is self.search_code and threading.get_ident() == self.main:
            self.depth -= 1
            if self.depth == 0:
                self.current = None
            return
        if event != "call" or not self.active:
            return
        if frame.f_code in self.watched:
            alias = getattr(frame.f_locals.get("self"), "alias", "")
            self.watched_calls[(self.watched[frame.f_code], threading.current_thread().name, alias)] += 1
            return
        rel = self.rel(frame)
        if rel is None or frame.f_code.co_name == "<module>":
            return
        self.files.setdefault(rel, None)
        self.calls[rel] += 1
        caller = self.caller(frame)
        if caller is not None and package(caller) != package(rel):
            self.crossings[(package(caller), package(rel))] += 1
        if caller is not None and caller != rel and not frame.f_code.co_name.startswith("<"):
            self.handoffs[(caller, rel)] += 1
        if caller is None:
            self.from_outside.add(rel)
        if rel.startswith(INFRASTRUCTURE):
            self.infra[(threading.current_thread().name, rel, frame.f_code.co_name, self.chain(frame))] += 1
        ident = threading.get_ident()
        if frame.f_code is self.search_code and ident == self.main:
            self.depth += 1
            if self.depth == 1:
                self.current = Search()
                self.searches.append(self.current)
                self.entered.clear()
        if self.current is None or not rel.startswith(RETRIEVAL + "/") or caller == rel:
            return
        if self.on_stack(frame, rel):
            return
        thread = "main" if ident == self.main else self.names.setdefault(ident, threading.current_thread().name)
        self.current.entries[thread].append(rel)
        self.entered[ident][rel] += 1
        if self.entered[ident][rel] > 1:
            self.current.repeated[thread].add(rel)


def make_world(embedder: str) -> tuple[str, object]:
    """One tenant, one corpus of the demo policies, a reader key: (raw key, tenant)."""
    # Django is set up by now (create_database): model imports come after it.
    from kb.ingest import run_ingest_job, upload_document
    from kb.models import Corpus
    from tenants.models import ApiKey, Tenant
    from tenants.scope import Scope, activate

    tenant = Tenant.objects.create(name="Request Path Co", slug="request-path-co")
    scope = Scope(tenant_id=tenant.id, all_departments=True, role="admin", principal="bench")
    with activate(scope):
        corpus = Corpus.objects.create(tenant=tenant, name="Policies", embedding_model=embedder.split(":")[0],
                                       **({"embedding_dim": int(embedder.split(":")[1])} if ":" in embedder else {}))
    for path in sorted((ROOT / "kb" / "demo").glob("*.md")):
        _, job = upload_document(scope=scope, corpus=corpus, filename=path.name, data=path.read_bytes(),
                                 title=path.stem.replace("-", " ").capitalize())
        if job is not None:  # None: the same bytes are already in the corpus
            run_ingest_job(job_id=job.id, tenant_id=tenant.id)
    _, raw = ApiKey.issue(tenant=tenant, name="reader key", role="reader", all_departments=True, departments=None)
    return raw, tenant


def ask(key: str, question: str, strategy: str) -> dict:
    from rest_framework.test import APIClient  # after Django's setup, like every import of the project

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    r = client.post("/api/v1/ask/", {"question": question, "strategy": strategy}, format="json")
    if r.status_code != 200:
        raise SystemExit(f"ask answered {r.status_code}: {r.content[:500]!r}")
    return r.json()


def on_side_threads(submit, profile, workers: int, record: dict | None = None) -> None:
    """Set `profile` on every side-connection worker thread (made by the warm-up, before the tracer):
    one task per worker, each held at a barrier until all are running, so each thread takes one.
    With `record`, each thread's open connections are recorded there first (`open_connections`)."""
    if workers <= 0:
        return
    barrier = threading.Barrier(workers)

    def install() -> None:
        barrier.wait(timeout=30)
        if record is not None:
            record[threading.current_thread().name] = open_connections()
        sys.setprofile(profile)

    for future in [submit(install, workers=workers) for _ in range(workers)]:
        future.result()


def open_connections() -> dict[str, int | None]:
    """This thread's database connections: alias -> id of the open DB-API connection, None when closed."""
    from django.db import connections  # after Django's setup, like every import of the project

    return {c.alias: (id(c.connection) if c.connection is not None else None) for c in connections.all(initialized_only=True)}


def watched_library_code() -> dict:
    """The library functions (e) counts: Django opening a connection, and closing old ones at a request's edges."""
    from django.db import close_old_connections  # after Django's setup
    from django.db.backends.base.base import BaseDatabaseWrapper

    # `connect` is wrapped by django.utils.asyncio.async_unsafe, whose wrapper's code every wrapped method shares.
    return {inspect.unwrap(BaseDatabaseWrapper.connect).__code__: "connect", close_old_connections.__code__: "close_old_connections"}


def report_handoffs(tracer: Tracer) -> None:
    """(d): hand-off files, leaves and edge files (see the module docstring)."""
    files = list(tracer.files)
    entered_from: dict[str, set[str]] = defaultdict(set)
    calls_into: dict[str, set[str]] = defaultdict(set)
    for caller, callee in tracer.handoffs:
        entered_from[callee].add(caller)
        calls_into[caller].add(callee)
    handoff = [f for f in files if entered_from[f] and calls_into[f]]
    leaves = [f for f in files if entered_from[f] and not calls_into[f]]
    edges = [f for f in files if not entered_from[f] and f in tracer.from_outside]
    callbacks = [f for f in files if not entered_from[f] and f not in tracer.from_outside]
    print(f"\n(d) hand-off path: {len(handoff)} files entered from another project file that call into another "
          f"(they pass the request on); {len(leaves)} leaves; {len(edges)} edge files (entered only from Django, DRF "
          f"or a thread)" + (f"; {len(callbacks)} files run only as callbacks" if callbacks else ""))
    for f in handoff:
        print(f"  hand-off  {f} -> " + ", ".join(g for g in files if g in calls_into[f]))
    for f in leaves:
        print(f"  leaf      {f}  (from " + ", ".join(g for g in files if g in entered_from[f]) + ")")
    for f in edges:
        print(f"  edge      {f}" + (" -> " + ", ".join(g for g in files if g in calls_into[f]) if calls_into[f] else ""))
    for f in callbacks:
        print(f"  callback  {f}")


def report_infrastructure(tracer: Tracer, before: dict[str, dict], after_main: dict, conn_settings: dict[str, tuple]) -> None:
    """(e): the infrastructure files entered, why, and the connections opened (see the module docstring)."""
    infra_files = [f for f in tracer.files if f.startswith(INFRASTRUCTURE)]
    print(f"\n(e) infrastructure files ({INFRASTRUCTURE}*) on the path: {len(infra_files)}"
          + (f" ({', '.join(infra_files)})" if infra_files else ""))
    for (thread, rel, function, frames), n in sorted(tracer.infra.items()):
        print(f"  [{thread}] {rel}:{function} x{n}  <- " + " <- ".join(frames))
    opened = {k: n for k, n in tracer.watched_calls.items() if k[0] == "connect"}
    print("  connections opened during the request: " + (", ".join(
        f"[{thread}] {alias} x{n}" for (_, thread, alias), n in sorted(opened.items())) or "none"))
    closed = sum(n for k, n in tracer.watched_calls.items() if k[0] == "close_old_connections")
    print(f"  close_old_connections calls during the request: {closed} (the test client disconnects it from "
          "request_started/request_finished; a WSGI server such as gunicorn runs it at both)")
    for alias, (max_age, health) in conn_settings.items():
        print(f"  {alias}: CONN_MAX_AGE {max_age}, CONN_HEALTH_CHECKS {health}")
    for thread, conns in before.items():
        now = after_main if thread == "main" else None
        state = ", ".join(f"{a} {'open' if c is not None else 'closed'}" + (
            "" if now is None else " (same after)" if now.get(a) == c else " (replaced)") for a, c in conns.items())
        print(f"  before the request, [{thread}]: {state or 'no connection'}")


def report(tracer: Tracer, run: dict, show_calls: bool) -> None:
    files = list(tracer.files)
    packages = list(dict.fromkeys(package(f) for f in files))
    print(f"\nrun {run.get('id')}: strategy {run.get('strategy')}, outcome {run.get('outcome')}, "
          f"{len(run.get('steps') or [])} steps, {len(run.get('citations') or [])} citations")
    print("\n(a) project files in first-entered order:")
    for i, f in enumerate(files, 1):
        print(f"  {i:3d}  {f}" + (f"  ({tracer.calls[f]} calls)" if show_calls else ""))
    print(f"\n(b) files: {len(files)}; packages: {len(packages)} ({', '.join(packages)}); package boundary crossings: "
          f"{len(tracer.crossings)} distinct caller->callee package pairs, {sum(tracer.crossings.values())} calls")
    for (a, b), n in sorted(tracer.crossings.items()):
        print(f"       {a} -> {b}: {n}")
    retrieval_files = [f for f in files if f.startswith(RETRIEVAL + "/")]
    print(f"\n(c) kb/retrieval: {len(retrieval_files)} files; {len(tracer.searches)} searches")
    worst: Counter[str] = Counter()
    for i, s in enumerate(tracer.searches, 1):
        print(f"  search {i}:")
        for thread, entries in s.entries.items():
            counts = Counter(entries)
            print(f"    [{thread}] " + " > ".join(e.rsplit("/", 1)[1] for e in entries))
            for m, n in counts.items():
                worst[m] = max(worst[m], n)
            if s.repeated.get(thread):
                print(f"    [{thread}] entered more than once: " + ", ".join(
                    f"{m.rsplit('/', 1)[1]} x{counts[m]}" for m in sorted(s.repeated[thread])))
    repeated = {m: n for m, n in worst.items() if n > 1}
    print("  modules entered more than once in some search: " + (", ".join(
        f"{m.rsplit('/', 1)[1]} (up to {n}x)" for m, n in sorted(repeated.items())) or "none"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--question", default=QUESTION)
    ap.add_argument("--strategy", default="auto")
    ap.add_argument("--embedder", default=os.environ.get("GROUNDED_EMBEDDER", "hash"),
                    help="embedding model of the corpus (GROUNDED_EMBEDDER; default hash)")
    ap.add_argument("--relevance", default=os.environ.get("GROUNDED_RELEVANCE_MODEL", "none"),
                    help="GROUNDED_RELEVANCE_MODEL (default none; `packaged` is the product default)")
    ap.add_argument("--calls", action="store_true", help="print the number of calls per file")
    ap.add_argument("--keep-db", action="store_true")
    ap.add_argument("--worker-warm-up", action="store_true",
                    help="first run the search warm-up a gunicorn worker runs (kb/warm.py warm_search: a connection "
                         "on every side-connection thread), as production does before its first request")
    args = ap.parse_args()
    os.environ["GROUNDED_EMBEDDER"] = args.embedder
    os.environ["GROUNDED_RELEVANCE_MODEL"] = args.relevance
    os.environ.setdefault("GROUNDED_PROVIDER", "offline")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings_module())
    dbname = f"request_path_{os.getpid()}"
    create_database(dbname)  # sets Django up
    # After Django's setup (create_database).
    from django.conf import settings
    from django.test.utils import setup_test_environment

    import kb.retrieval
    from kb.retrieval.retrieve import submit

    setup_test_environment()  # the test client's host is allowed
    try:
        key, _ = make_world(args.embedder)
        if args.worker_warm_up:
            from kb.warm import warm_search  # after Django's setup

            warm_search()
        ask(key, WARM_UP, args.strategy)
        workers = settings.RETRIEVAL_PARALLEL_WORKERS
        tracer = Tracer(kb.retrieval.search.__code__, watched_library_code())
        before: dict[str, dict] = {"main": open_connections()}
        threading.setprofile(tracer)
        on_side_threads(submit, tracer, workers, record=before)
        sys.setprofile(tracer)
        tracer.active = True
        try:
            run = ask(key, args.question, args.strategy)
        finally:
            tracer.active = False
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type,unused-ignore]  # None removes it (typeshed versions differ)
            on_side_threads(submit, None, workers)
        after_main = open_connections()
        print(f"settings {os.environ['DJANGO_SETTINGS_MODULE']}, embedder {args.embedder}, relevance {args.relevance}, "
              f"provider {os.environ['GROUNDED_PROVIDER']}, side-connection workers {workers}")
        report(tracer, run, args.calls)
        report_handoffs(tracer)
        report_infrastructure(tracer, before, after_main, {alias: (db.get("CONN_MAX_AGE"), db.get("CONN_HEALTH_CHECKS"))
                                                           for alias, db in settings.DATABASES.items()})
    finally:
        if not args.keep_db:
            drop_database(dbname)


if __name__ == "__main__":
    main()
