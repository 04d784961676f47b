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
    "test_hostile_tenants": (4, "Hostile tenants"),
    "test_schema_fuzz": (4, "Bad input"),
    "test_audit_integrity": (5, "Audit"),
    "test_soak": (6, "Soak"),
}

# Each issue's findings, each with the tests that replay it (node ids; a parametrized test counts with all
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
ISSUE_47: list[tuple[str, list[str]]] = [
    ("A folder source could read another tenant's folder (SOURCES_FOLDER_ROOTS was one list for every tenant)",
     ["tests/api/test_sources.py::test_a_folder_granted_to_another_tenant_or_outside_the_grants_is_a_400_naming_config_path",
      "tests/api/test_sources_admin.py::test_the_add_form_refuses_another_tenants_folder_with_a_form_error",
      "tests/kb/sources/test_grant_command.py::test_an_operator_grants_lists_and_revokes_and_overlaps_are_refused",
      "tests/kb/sources/test_source_grants.py::test_a_tenant_cannot_add_a_folder_another_tenant_is_granted_or_one_outside_its_grants",
      "tests/kb/sources/test_source_grants.py::test_a_symlink_into_another_tenants_folder_is_judged_by_where_it_leads",
      "tests/kb/sources/test_source_grants.py::test_moving_a_source_into_another_tenants_folder_is_refused",
      "tests/kb/sources/test_source_grants.py::test_a_revoked_grant_fails_the_next_sync_and_removes_nothing",
      "tests/kb/sources/test_source_grants.py::test_overlapping_folder_grants_are_refused_by_the_service_and_by_the_database",
      "tests/kb/sources/test_source_grants.py::test_host_grants_narrow_website_and_s3_sources"]),
    ("A file swapped for a symlink between listing and reading was followed out of the folder; a hard link to an "
     "outside file was ingested",
     ["tests/kb/sources/test_folder_links.py::test_a_file_swapped_with_a_symlink_by_another_process_is_never_read_through_it",
      "tests/kb/sources/test_folder_links.py::test_a_hard_link_to_an_outside_file_is_skipped_with_its_reason",
      "tests/kb/sources/test_folder_links.py::test_symlinks_anywhere_are_listed_with_an_error_and_never_followed",
      "tests/kb/sources/test_folder_links.py::test_a_folder_replaced_by_a_symlink_fails_the_sync"]),
    ("Website and S3 sources reached a cloud metadata address (100.100.100.200) and shared address space (100.64/10)",
     ["tests/api/test_sources_outbound.py::test_finding_3_metadata_and_shared_addresses_are_refused_by_the_api",
      "tests/api/test_sources_outbound.py::test_finding_3_the_admin_form_refuses_metadata_and_shared_addresses",
      "tests/kb/sources/test_outbound_policy.py::test_non_public_address_forms_are_refused",
      "tests/kb/sources/test_outbound_policy.py::test_public_address_forms_are_allowed",
      "tests/kb/sources/test_outbound_policy.py::test_the_table_is_the_issue_s_forty_forms_and_more",
      "tests/kb/sources/test_outbound_policy.py::test_every_address_of_a_name_is_checked_and_grants_open_private_not_metadata",
      "tests/kb/sources/test_outbound_policy.py::test_website_dns_rebinding_is_refused_at_connect_time",
      "tests/kb/sources/test_outbound_policy.py::test_s3_dns_rebinding_is_refused_at_connect_time",
      "tests/kb/sources/test_outbound_policy.py::test_a_redirect_hop_to_a_refused_address_is_refused",
      "tests/api/test_sources_outbound.py::test_a_host_granted_with_private_addresses_is_reachable_by_that_tenant_only"]),
    ("Stored website credentials followed a changed start URL to another host",
     ["tests/api/test_sources_outbound.py::test_finding_4_a_changed_address_drops_the_credentials_and_the_new_host_never_sees_them",
      "tests/api/test_sources_outbound.py::test_finding_4_s3_credentials_are_bound_to_endpoint_and_bucket",
      "tests/api/test_sources_outbound.py::test_finding_4_the_admin_drops_credentials_when_the_address_changes",
      "tests/kb/sources/test_outbound_policy.py::test_credentials_reach_their_origin_only"]),
    ("A .docx whose main part is word/document.bin (10 million empty runs, 1.35 MB) parsed for 250 s and grew the "
     "worker to 2.9 GiB",
     ["tests/reliability/test_hostile_tenants.py::test_a_docx_whose_main_part_is_document_bin_fails_fast_in_bounded_memory",
      "tests/kb/test_parse_isolation.py::test_a_docx_whose_main_part_is_document_bin_is_refused_by_the_element_limit_fast_in_bounded_memory",
      "tests/kb/test_parse_isolation.py::test_every_part_typed_as_xml_counts_whatever_its_name",
      "tests/kb/test_parse_isolation.py::test_a_word_package_is_found_by_its_relationships_whatever_its_main_part_is_called",
      "tests/kb/test_parse_isolation.py::test_a_part_the_relationships_name_must_exist_and_be_typed",
      "tests/kb/test_parse_isolation.py::test_a_parse_past_its_wall_time_is_killed_from_outside_and_the_next_parse_works",
      "tests/kb/test_parse_isolation.py::test_a_parse_past_its_memory_cap_is_stopped_and_the_next_parse_works",
      "tests/kb/test_parse_isolation.py::test_a_document_whose_parse_is_killed_fails_naming_the_limit_and_the_next_is_ingested"]),
    ("NUL bytes in admin list filters gave 500 (9 URLs: outcome, strategy, rating, status, kind, role)",
     ["tests/api/test_admin_hostile_params.py::test_hostile_list_filters_search_and_ordering_as_a_tenant_admin",
      "tests/api/test_admin_hostile_params.py::test_hostile_list_filters_search_and_ordering_as_an_operator",
      "tests/api/test_admin_hostile_params.py::test_nul_in_a_query_or_form_is_a_400_naming_the_parameter",
      "tests/api/test_admin_hostile_params.py::test_nul_in_every_json_string_field_of_the_api_is_a_4xx"]),
    ("`manage.py mcp --http` had no rate limit (260 calls in 8 s with one key, all 200)",
     ["tests/api/test_mcp_limits.py::test_a_key_past_its_requests_per_minute_gets_429_with_retry_after",
      "tests/api/test_mcp_limits.py::test_ask_past_the_daily_run_budget_is_refused"]),
    ("As the application role, set_config('app.tenant_id', <another tenant>) read that tenant's rows, and "
     "grounded_user_tenants(<any user>) listed any user's memberships",
     ["tests/tenants/test_db_wall.py::test_a_tenant_named_without_a_valid_proof_reads_nothing",
      "tests/tenants/test_db_wall.py::test_the_user_look_up_answers_for_the_signed_in_user_only",
      "tests/tenants/test_db_wall.py::test_the_application_role_cannot_read_or_change_the_key",
      "tests/tenants/test_db_wall.py::test_a_key_the_database_does_not_hold_opens_nothing",
      "tests/tenants/test_db_wall.py::test_the_applications_own_path_reads_its_tenant",
      "tests/tenants/test_db_wall.py::test_migration_0007_rewrites_every_policy_and_reverses",
      "tests/reliability/test_hostile_tenants.py::test_the_database_wall_keeps_search_paths_and_its_overhead_is_measured"]),
    ("No lockout per account (38 wrong passwords from two addresses, then the right one signed in)",
     ["tests/api/test_signin_lockout.py::test_failures_from_two_addresses_lock_the_account_until_the_window_ends"]),
    ("A deleted document's ingest kept the worker busy (a 19.5 MB upload ran 2.5 minutes after its deletion)",
     ["tests/kb/test_ingest_cancel.py::test_deleting_a_document_while_it_parses_kills_the_parse_and_frees_the_worker",
      "tests/kb/test_ingest_cancel.py::test_deleting_a_document_while_it_embeds_stops_before_the_next_batch",
      "tests/kb/test_ingest_cancel.py::test_a_queued_job_of_a_deleted_document_does_nothing"]),
    ("Runs newer than the last chain digest could be deleted undetected; scripts/run wrote no digest (16 minutes, none)",
     ["tests/agents/test_digest_schedule.py::test_beat_writes_digests_every_chain_digest_interval",
      "tests/agents/test_digest_schedule.py::test_the_beat_task_writes_only_for_a_chain_that_moved",
      "tests/agents/test_digest_schedule.py::test_the_loop_writes_a_digest_each_period_and_a_later_deletion_is_detected",
      "tests/agents/test_digest_schedule.py::test_write_chain_digests_changed_only_from_the_command"]),
]
FINDINGS: dict[int, tuple[str, list[tuple[str, list[str]]]]] = {
    29: ("an audit trail that survives re-uploads, deletions and truncation; fail-safe on hostile input and faults",
         ISSUE_29),
    47: ("hostile tenants: sources that reach only what is theirs, parse limits for any layout, a database wall "
         "the application role cannot move", ISSUE_47),
}
FINDING_TESTS = [ref for _, findings in FINDINGS.values() for _, refs in findings for ref in refs]

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
- **Issues 29 and 47** (29: an audit trail that survives re-uploads, deletions and truncation, fail-safe
  on hostile input and faults; 47: hostile tenants): each finding and the tests that replay it, with
  their result in this run, are listed after the table.
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


def _findings_rows(rows: list[dict]) -> list[str]:
    """Per issue, one line per finding: its tests and their result in this run (a parametrized test with
    all its cases)."""
    lines = []
    for number, (_, findings) in FINDINGS.items():
        lines += _issue_rows(number, findings, rows)
    return lines


def _issue_rows(number: int, findings: list[tuple[str, list[str]]], rows: list[dict]) -> list[str]:
    lines = ["", f"## Issue {number}: each finding and the tests that replay it", "",
             "| Finding | Tests | Result |", "|---|---|---|"]
    for finding, refs in findings:
        matched = [r for r in rows if any(r["nodeid"] == ref or r["nodeid"].startswith(ref + "[") for ref in refs)]
        tests = "<br>".join(f"`{ref}`" for ref in refs)
        lines.append(f"| {_cell(finding)} | {tests} | {_result(matched) if matched else 'not in this run'} |")
    return lines


def render(data: dict) -> str:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    referenced = {ref.split("::")[0] for ref in FINDING_TESTS}
    for row in data["rows"]:
        outside = row["module"].rsplit(".", 1)[-1] not in AREAS and row["nodeid"].split("::")[0] in referenced
        if not outside:  # tests outside the suite, run for the findings' lists only, get no row of their own
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
    lines += _findings_rows(data["rows"])
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
