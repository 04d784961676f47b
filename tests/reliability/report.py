"""Turn the reliability plugin's JSON into docs/reliability.md.

    .venv/bin/python -m tests.reliability.report .data/reliability/results.json docs/reliability.md

Run by scripts/reliability; nothing in docs/reliability.md is written by hand (the prose is here).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

AREAS = {  # module (last part) -> (order, area)
    "test_cross_tenant": (1, "Isolation"),
    "test_injection": (2, "Prompt injection"),
    "test_provider_faults": (3, "Faults"),
    "test_infra_faults": (3, "Faults"),
    "test_default_run": (3, "Faults"),
    "test_bad_input": (4, "Bad input"),
    "test_hostile_input": (4, "Bad input"),
    "test_schema_fuzz": (4, "Bad input"),
    "test_audit_integrity": (5, "Audit"),
    "test_soak": (6, "Soak"),
}

# Issue 29's findings, each with the tests that replay it (node ids; a parametrized test counts with all
# its cases). scripts/reliability runs those outside tests/reliability too, so each finding's result is
# from the same run as the table.
ISSUE_29: list[tuple[str, list[str]]] = [
    ("After a re-upload an earlier run's citation showed \"chunk 54 (deleted or not visible)\", with no document version",
     ["tests/api/test_evidence_retention.py::test_citations_stay_viewable_after_reupload_and_delete",
      "tests/api/test_evidence_retention.py::test_purge_respects_retention",
      "tests/api/test_evidence_retention.py::test_purge_removes_what_only_runs_past_retention_reference_and_refuses_the_rest",
      "tests/api/test_evidence_retention.py::test_the_application_role_cannot_change_or_delete_evidence"]),
    ("Deleting the newest runs (owner connection) was not detected: the chain had no anchor outside the database",
     ["tests/agents/test_chain_digests.py::test_removing_the_newest_runs_is_caught_by_the_digests_not_by_the_chain",
      "tests/agents/test_chain_digests.py::test_a_consistently_rewritten_chain_is_caught_with_the_first_bad_seq",
      "tests/agents/test_chain_digests.py::test_a_rewrite_inside_a_digests_range_is_located_at_the_exact_run",
      "tests/agents/test_chain_digests.py::test_a_digest_signed_with_another_key_is_rejected"]),
    ("The agentic loop's final context was derived afterwards, not recorded with its model call",
     ["tests/agents/test_model_inputs.py::test_each_model_calls_input_is_recorded_and_rebuilds_exactly",
      "tests/agents/test_model_inputs.py::test_the_recorded_input_is_under_the_hash_chain"]),
    ("A citation marker planted in a document (\"[c:31]\") became a citation of another tenant's chunk",
     ["tests/agents/test_injection.py::test_a_citation_marker_planted_in_a_document_never_becomes_a_citation"]),
    ("`GET /api/v1/runs/?q=` ignored the text; \"asked by\" showed `key:<public id>`, not the key's name",
     ["tests/api/test_runs_review.py::test_runs_q_searches_question_and_answer_full_text_and_substring",
      "tests/api/test_runs_review.py::test_runs_show_the_keys_and_users_name_next_to_the_principal",
      "tests/api/test_runs_review.py::test_admin_review_searches_text_and_names_principals"]),
    ("The SSE stream sent steps of a run that was never recorded (database stopped mid-run)",
     ["tests/api/test_ask_stream.py::test_a_run_the_database_refuses_to_store_ends_the_stream_with_run_not_recorded"]),
    ("An 88 KB .docx expanding to 60 MB kept a worker parsing for 4 minutes, memory 0.69 -> 2.8 GB",
     ["tests/reliability/test_hostile_input.py::test_a_docx_zip_bomb_fails_fast_in_bounded_memory",
      "tests/reliability/test_hostile_input.py::test_a_docx_zip_bomb_upload_fails_its_document_with_a_clear_error",
      "tests/reliability/test_hostile_input.py::test_parsing_limits_on_pages_elements_blocks_characters_and_time"]),
    ("Default run: a worker killed mid-ingest left the document `processing` forever (nothing scheduled the reaper)",
     ["tests/reliability/test_default_run.py::test_worker_sigkilled_mid_ingest_in_the_default_run_the_document_finishes_by_itself",
      "tests/kb/test_stuck_reupload.py::test_the_reaper_resends_a_silent_running_job_sooner_than_a_waiting_queued_one"]),
    ("Re-uploading a stuck document's bytes answered 201 with `jobs: [null]` and it stayed stuck",
     ["tests/kb/test_stuck_reupload.py::test_the_same_bytes_again_resume_a_document_whose_worker_died",
      "tests/api/test_stuck_reupload.py::test_reuploading_a_stuck_documents_bytes_returns_its_job_and_the_document_finishes",
      "tests/kb/test_stuck_reupload.py::test_the_same_bytes_again_queue_a_job_for_a_document_left_without_one"]),
    ("After the embedded PostgreSQL stopped, /healthz stayed 503 and the API 500 until gunicorn was reloaded",
     ["tests/reliability/test_default_run.py::test_embedded_database_stopped_healthz_ok_again_without_reloading_gunicorn",
      "tests/tenants/test_embedded_db.py::test_a_stopped_server_is_started_again_by_the_next_connection"]),
    ("500 instead of a 400 naming the field: ids past bigint, NUL in filters and metadata, 100,000 `[`, nested metadata, "
     "forged cursors, impossible dates, `principal=%00`, an auditor on the admin's upload and chunk-search pages",
     ["tests/reliability/test_hostile_input.py::test_hostile_search_filters_are_a_400_naming_the_field",
      "tests/reliability/test_hostile_input.py::test_a_body_of_100000_brackets_is_a_400_on_body",
      "tests/reliability/test_hostile_input.py::test_hostile_upload_metadata_is_a_400_on_metadata",
      "tests/reliability/test_hostile_input.py::test_hostile_query_parameters_are_a_400_naming_the_parameter",
      "tests/reliability/test_hostile_input.py::test_a_key_with_a_department_id_past_bigint_is_a_400",
      "tests/reliability/test_hostile_input.py::test_an_auditor_opening_the_upload_and_chunk_search_pages_gets_403"]),
    ("scripts/run served with DEBUG on: technical 500 pages, and a debug 404 listing every URL under /api/",
     ["tests/reliability/test_hostile_input.py::test_scripts_run_serves_with_debug_off_unless_asked",
      "tests/reliability/test_hostile_input.py::test_debug_off_takes_a_generated_key_from_secret_key_file",
      "tests/reliability/test_hostile_input.py::test_unknown_api_urls_are_a_json_404_with_debug_on",
      "tests/reliability/test_hostile_input.py::test_an_unhandled_error_is_a_bare_json_500_with_debug_on"]),
    ("A search filter with 300,000 metadata keys cost 4 s of CPU per request",
     ["tests/reliability/test_hostile_input.py::test_a_search_filter_with_300000_metadata_keys_is_refused_cheaply"]),
]
ISSUE_29_TESTS = [ref for _, refs in ISSUE_29 for ref in refs]

INTRO = """# Reliability and security

Generated by `scripts/reliability` from the standing suite in `tests/reliability/` (plus the API
schema fuzz in `tests/api/test_schema_fuzz.py`); do not edit by hand. Every row is one test: the
check it proves, what it tried, and what it measured on this machine.

- **Fast parts run in CI** (the default `pytest` run): isolation, injection (a stratified subset of
  24 payloads), provider faults, bad input, audit integrity.
- **Slow parts run with `--runslow`** (`scripts/test --runslow`, and always in `scripts/reliability`):
  real Celery workers SIGKILLed, a private Redis crashed and restarted, database connections
  terminated, the default run itself (`scripts/run` in a temporary folder) with its worker SIGKILLed
  mid-ingest and its embedded PostgreSQL stopped, all 158 injection payloads, the detector's
  false-positive rate on the whole clean corpus, and the soak (`bench/soak.py`: gunicorn + Celery
  worker, bounded mixed traffic; `GROUNDED_SOAK_SECONDS`, default 60).
- **Issue 29** (an audit trail that survives re-uploads, deletions and truncation; fail-safe on hostile
  input and faults): each finding and the tests that replay it, with their result in this run, are
  listed after the table.
- Injection data comes from `../shared/eval/` (never copied into the repository); those checks
  skip when it is absent.
"""

OUTRO = """
## How the checks work

- **Isolation.** `tests/reliability/world.py` builds two tenants with two departments each and plants
  unique canaries (`CNRYB…` in tenant B, `CNRYE…` in tenant A's Engineering department) in document
  bodies, titles, file names, metadata keys and values, corpus names and descriptions, department,
  key and member names, and in B's stored runs. Routes are enumerated from `get_resolver()`, tools
  from `agents.tools.TOOLS`, tasks from the Celery app's registry; an endpoint, tool or task without
  a probe fails the suite. Each probe is sent as tenant A's whole-tenant admin and as Sales-only keys,
  with B's (and Engineering's) ids in paths, query strings, bodies and search filters. A probe passes
  on not-found or empty, never a 5xx, and no canary in the body, SSE events, the runs it stored, any
  log record (all loggers at DEBUG) or admin page; B's rows are byte-for-byte unchanged.
- **Prompt injection.** Payloads are planted (start / middle / end) into copies of corpus articles in
  a separate tenant; a victim tenant holds a secret. The offline provider and a scripted adversarial
  Gemini (real SDK against a local fake) run over them; the adversary asks for the victim's ids,
  k = 10^6, unknown tools and a flood of calls.
- **Faults.** Provider faults go through the API with the fake Gemini server. Infrastructure faults
  use real worker subprocesses; "exactly once" means each document's chunks equal the chunker's output
  for its bytes, ordinals are contiguous, nothing is duplicated and the counts agree.
- **Self-healing (default run).** `tests/reliability/default_run.py` starts `scripts/run` itself in a
  temporary folder, with none of DATABASE_URL, REDIS_URL or CELERY_* set: embedded PostgreSQL and Redis,
  a Celery worker with beat, gunicorn with 2 workers. The worker's whole process group is SIGKILLed
  once its job reports 1-90 % done; the document must be ready within 2 minutes of the kill, its
  chunks exactly the chunker's output for its bytes (MiniLM's token counts), each embedded, and the
  job claimed again. The database is stopped with `pg_ctl stop -m immediate`, then its postmaster
  SIGKILLed; /healthz is polled from the moment the postmaster is gone and must answer 200 within
  30 s; then 30 requests on new connections (/healthz, the API, search; either web worker may take
  each) answer 200, gunicorn's arbiter and workers are the same processes, the log shows the product
  started the server again, and an upload is ingested.
- **Audit.** The forger is the database superuser with triggers disabled; every column of a run, a
  step and a citation row gets a one-byte change, verified and rolled back one at a time.
"""


def _fmt(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "; ".join(f"({', '.join(str(x) for x in v if x != '')})" if isinstance(v, list | tuple) else _fmt(v) for v in value)
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _result(rows: list[dict]) -> str:
    outcomes = defaultdict(int)
    for r in rows:
        outcomes[r["outcome"]] += 1
    n = len(rows)
    if outcomes.get("failed"):
        return f"**FAIL** ({outcomes['failed']}/{n})"
    if outcomes.get("xfailed") == n:
        return "known gap (xfail)"
    if outcomes.get("xpassed"):
        return "**XPASS** (gap closed? remove the xfail)"
    if outcomes.get("skipped") == n:
        return "skipped"
    if outcomes.get("not run") == n:
        return "not run"
    passed = outcomes.get("passed", 0)
    extra = [f"{v} {k}" for k, v in outcomes.items() if k != "passed" and v]
    return "pass" + (f" ({n} cases)" if n > 1 else "") + (f"; {', '.join(extra)}" if extra else "") if passed else ", ".join(extra)


def _issue_29_rows(rows: list[dict]) -> list[str]:
    """One line per finding: its tests and their result in this run (a parametrized test with all its cases)."""
    lines = ["", "## Issue 29: each finding and the tests that replay it", "",
             "| Finding | Tests | Result |", "|---|---|---|"]
    for finding, refs in ISSUE_29:
        matched = [r for r in rows if any(r["nodeid"] == ref or r["nodeid"].startswith(ref + "[") for ref in refs)]
        tests = "<br>".join(f"`{ref}`" for ref in refs)
        lines.append(f"| {_cell(finding)} | {tests} | {_result(matched) if matched else 'not in this run'} |")
    return lines


def render(data: dict) -> str:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    referenced = {ref.split("::")[0] for _, refs in ISSUE_29 for ref in refs}
    for row in data["rows"]:
        outside = row["module"].rsplit(".", 1)[-1] not in AREAS and row["nodeid"].split("::")[0] in referenced
        if not outside:  # tests outside the suite, run for issue 29's list only, get no row of their own
            groups[(row["module"], row["function"])].append(row)
    ordered = sorted(groups.items(), key=lambda kv: (AREAS.get(kv[0][0].rsplit(".", 1)[-1], (9, ""))[0], kv[0][0]))
    totals: dict[str, int] = defaultdict(int)
    for row in data["rows"]:
        totals[row["outcome"]] += 1
    lines = [INTRO, f"Last run: {data['finished_at']}, slow parts {'included' if data['runslow'] else 'NOT included'}; "
             f"test items: " + ", ".join(f"{v} {k}" for k, v in sorted(totals.items())) + ".", "",
             "| Area | Check | Tried | Result | Measured | Time |", "|---|---|---|---|---|---|"]
    details, gaps, failures = [], [], []
    for (module, _function), rows in ordered:
        area = AREAS.get(module.rsplit(".", 1)[-1], (9, "Other"))[1]
        counts: dict[str, int] = defaultdict(int)
        figures: dict[str, object] = {}
        for r in rows:
            for k, v in r["counts"].items():
                counts[k] += v
            figures.update(r["figures"])
        tried = ", ".join(f"{v:,} {k}" for k, v in counts.items()) or (f"{len(rows)} cases" if len(rows) > 1 else "")
        short, long_ = {}, {}
        for k, v in figures.items():
            (short if len(_fmt(v)) <= 110 else long_)[k] = v
        measured = "; ".join(f"{k}: {_fmt(v)}" for k, v in short.items())
        if long_:
            measured += (" " if measured else "") + "(details below)"
            details.append((rows[0]["check"], long_))
        slow = " (slow)" if any(r["slow"] for r in rows) else ""
        seconds = sum(r["duration_s"] for r in rows)
        check = _cell(rows[0]["check"]) + slow
        lines.append(f"| {area} | {check} | {_cell(tried)} | {_result(rows)} | {_cell(measured)} | {seconds:.0f} s |")
        for r in rows:
            if r["outcome"] == "xfailed":
                gaps.append(f"- **{r['check']}** (`{r['nodeid']}`): {r['message']}")
            elif r["outcome"] == "failed":
                failures.append(f"- `{r['nodeid']}`:\n\n```\n{r['message'].strip()[-500:]}\n```")
    if failures:
        lines += ["", "## Failures", "", *failures]
    if gaps:
        lines += ["", "## Known gaps (strict xfail: the test fails until the gap is closed)", "", *sorted(set(gaps))]
    lines += _issue_29_rows(data["rows"])
    if details:
        lines += ["", "## Details"]
        for check, figs in details:
            lines += ["", f"### {check}", ""]
            for k, v in figs.items():
                if isinstance(v, dict):
                    lines += [f"**{k}**", "", "| | |", "|---|---|", *[f"| {_cell(str(a))} | {_cell(_fmt(b))} |" for a, b in v.items()], ""]
                else:
                    lines += [f"- **{k}**: {_cell(_fmt(v))}"]
    lines.append(OUTRO)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    target.write_text(render(json.loads(source.read_text())))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
