"""Source sync cost: a 1,000-file folder source, first sync vs a second sync with nothing changed,
then one file changed.

    .venv/bin/python bench/sources_bench.py [--items 1000]

Runs on the embedded PostgreSQL in a scratch database, in eager mode (no broker: each new item's
ingest job runs in this process right after its commit, as one worker would), with the hash embedder
(the cost measured is the sync's own, not a model's). Every text handed to the embedder is counted.
Targets (issue 33): the unchanged sync takes <= 5 % of the first and embeds nothing; changing one
file re-embeds only that file's new chunks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DB_NAME = "grounded_bench_sources"


def write_files(root: Path, n: int) -> list[Path]:
    folders = ("hr", "finance", "public", "engineering")
    paths = []
    for i in range(n):
        path = root / folders[i % len(folders)] / f"policy-{i:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Policy {i}\n\nRule {i}.1: requests of kind {i} are answered within {i % 9 + 1} days.\n\n"
                        f"Rule {i}.2: form F-{i} goes to the office of team {i % 17}.\n")
        paths.append(path)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    args = parser.parse_args()
    for var in ("REDIS_URL", "CELERY_BROKER_URL", "DATABASE_URL"):
        os.environ.pop(var, None)
    tmp = Path(tempfile.mkdtemp(prefix="grounded-sources-bench-"))
    os.environ.update({"GROUNDED_DB_NAME": DB_NAME, "GROUNDED_EMBEDDER": "hash", "SOURCES_FOLDER_ROOTS": str(tmp),
                       "CELERY_TASK_ALWAYS_EAGER": "1",  # no broker: each job runs here, as one worker would
                       "DJANGO_SETTINGS_MODULE": "api.project.settings"})
    from bench.benchdb import create_database, drop_database

    create_database(DB_NAME)
    try:
        return run(tmp, args.items)
    finally:
        drop_database(DB_NAME)


def run(tmp: Path, n: int) -> int:
    from kb.embedding import HashEmbedder
    from kb.models import Corpus, Document, SourceSync
    from kb.sources.grants import grant_source
    from kb.sources.services import source_create
    from kb.sources.sync import request_sync
    from tenants.models import Department, Tenant
    from tenants.scope import Scope, activate

    embedded: list[str] = []
    original = HashEmbedder.embed

    def counting(self, texts, task="document"):
        if task == "document":
            embedded.extend(texts)
        return original(self, texts, task)

    HashEmbedder.embed = counting
    share = tmp / "share"
    paths = write_files(share, n)
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    grant_source(tenant=tenant, kind="folder", value=str(tmp), granted_by="bench")  # as manage.py grant_source does
    scope = Scope.system(tenant.id, principal="bench")
    with activate(scope):
        hr = Department.objects.create(tenant=tenant, name="HR")
        fin = Department.objects.create(tenant=tenant, name="Finance")
        corpus = Corpus.objects.create(tenant=tenant, name="Share", embedding_model="hash", embedding_dim=64)
    source = source_create(scope=scope, corpus=corpus, name="Share", kind="folder", config={"path": str(share)},
                           department_rules=[{"prefix": "hr/", "department": hr.pk}, {"prefix": "finance/", "department": fin.pk}],
                           schedule_minutes=0)

    def sync(label: str) -> dict:
        before = len(embedded)
        t0 = time.perf_counter()
        done, _ = request_sync(scope=scope, source=source)  # eager: runs (with its ingest jobs) when the request commits
        seconds = time.perf_counter() - t0
        with activate(scope):
            s = SourceSync.objects.for_scope(scope).get(pk=done.pk)
        return {"sync": label, "seconds": seconds, "embedded": len(embedded) - before, "added": s.added, "changed": s.changed,
                "unchanged": s.unchanged, "removed": s.removed, "failed": s.failed, "status": s.status}

    rows = [sync(f"first ({n} new files)"), sync("second (nothing changed)")]
    paths[7].write_text(paths[7].read_text() + "\nRule 7.3: a new clause added upstream.\n")
    rows.append(sync("third (1 file changed)"))
    with activate(scope):
        ready = Document.objects.for_scope(scope).filter(corpus=corpus, status="ready").count()

    print(f"\n{n}-file folder source, hash embedder, eager mode, embedded PostgreSQL\n")
    print("| sync | seconds | texts embedded | added | changed | unchanged | removed | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['sync']} | {r['seconds']:.2f} | {r['embedded']} | {r['added']} | {r['changed']} | {r['unchanged']} "
              f"| {r['removed']} | {r['failed']} |")
    first, second, third = rows
    ratio = second["seconds"] / first["seconds"]
    print(f"\nsecond / first: {ratio:.1%} (target <= 5 %); documents ready: {ready}/{n}")
    checks = {"second sync <= 5 % of the first": ratio <= 0.05, "second sync embeds nothing": second["embedded"] == 0,
              "third sync changes one file only": (third["changed"], third["added"], third["unchanged"]) == (1, 0, n - 1),
              "third sync embeds only that file's new chunks": 0 < third["embedded"] <= 3,
              "all syncs done, nothing failed": all(r["status"] == "done" and r["failed"] == 0 for r in rows) and ready == n}
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
