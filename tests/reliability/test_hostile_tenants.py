"""Issue 47's measured figures, recorded for docs/reliability.md: the .docx whose main part is not named
document.xml (parse time and peak memory, in a fresh interpreter and through the parse sandbox), and what
the database wall adds to a search (bench/db_wall.py, slow). The findings' replay tests live beside the
code they test (tests/reliability/report.py lists them under issue 47)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from kb.parse_sandbox import parse_isolated
from kb.parsing import ParseLimitExceeded, ParseLimits
from tests.kb.test_parse_isolation import _MEASURE, empty_runs, package

ROOT = Path(__file__).resolve().parents[2]


def test_a_docx_whose_main_part_is_document_bin_fails_fast_in_bounded_memory(reliability, tmp_path):
    """Parsing limits: a .docx whose main part is word/document.bin (10 million empty runs) fails in 10 s, under +100 MiB"""
    bomb = package(body=empty_runs(10_000_000))
    with zipfile.ZipFile(io.BytesIO(bomb)) as zf:
        unpacked = sum(m.file_size for m in zf.infolist())
    (path := tmp_path / "bomb.docx").write_bytes(bomb)
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    seconds, grown = found["seconds"], found["peak_growth"] / 2**20
    assert found["error"] is not None and "markup elements" in found["error"], found
    assert seconds < 10 and grown < 100, found

    limits = ParseLimits()
    parse_isolated(b"warm the helper", "w.txt", limits=limits, max_memory_mb=1024)
    started = time.monotonic()
    with pytest.raises(ParseLimitExceeded, match="markup elements"):
        parse_isolated(bomb, "bomb.docx", limits=limits, max_memory_mb=1024)
    sandboxed = time.monotonic() - started
    assert sandboxed < 10
    reliability.figure("packed / unpacked", f"{len(bomb) / 2**20:.2f} MiB / {unpacked / 2**20:.1f} MiB")
    reliability.figure("fresh interpreter", f"{seconds:.2f} s, peak RSS +{grown:.0f} MiB: {found['error']}")
    reliability.figure("through the parse sandbox", f"{sandboxed:.2f} s")


@pytest.mark.slow
def test_the_database_wall_keeps_search_paths_and_its_overhead_is_measured(reliability):
    """Database wall: bench/db_wall.py, the same searches under the old policy and the wall: same paths, overhead measured"""
    done = subprocess.run([sys.executable, "bench/db_wall.py", "--rows", "100000", "--rounds", "24"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and " ms" not in line
            and not line.startswith("| case")]
    paths: dict[str, set[str]] = {}
    for case, _form, *_, path in ([c.strip() for c in row] for row in rows):
        paths.setdefault(case, set()).add(re.sub(r"\s+", " ", path))
    assert paths and all(len(p) == 1 for p in paths.values()), paths  # every policy form took the same path
    pooled = {m.group(1): m.group(2) for m in re.finditer(r"all cases, (wall|wall, bare call): median [\d.]+ ms \(([+-][\d.]+%)\)", out)}
    ratios = re.search(r"wall: median [\d.]+ ms \([^)]*\), mean [\d.]+ ms \(([+-][\d.]+%)\), median of the cases' p50 ratios "
                       r"([+-][\d.]+%)", out)
    inside = re.search(r"server-side: (.*)", out)
    assert "wall" in pooled and ratios and inside, out[-3000:]
    reliability.figure("search p50, wall vs the old policy (pooled median)", pooled["wall"])
    reliability.figure("mean / median of the cases' p50 ratios", f"{ratios.group(1)} / {ratios.group(2)}")
    reliability.figure("bare call (what a distributed PostgreSQL would need)", pooled.get("wall, bare call", "-"))
    reliability.figure("inside the database", inside.group(1))
