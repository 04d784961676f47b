"""Parsing in a child process that the worker bounds from outside: wall time, memory, cancellation.

The limits inside a parse (kb.parsing_limits) are checked between steps. A step can still run long (one
regular expression over one long line: a Markdown heading line of 20,000 spaces takes 3.5 s, of
200,000 about six minutes) or a library can allocate past anything the counts foresaw. So the worker
never parses in its own process (`parse_document`):

- One helper process per worker process (`python -m kb.parse_sandbox`, started on first use) imports
  only the parsing code (~65 MB, ~0.5 s, once) and forks a fresh child for each document; the
  worker's own memory (the embedding model, torch) is never copied.
- The child caps its address space at its size when forked plus `PARSE_MAX_MEMORY_MB` (RLIMIT_AS) and
  its CPU time a little past `PARSE_MAX_SECONDS` (RLIMIT_CPU: it dies even if nobody is left to kill
  it), parses, and returns the result as JSON: never a pickle, as the child has read hostile bytes.
- The worker waits at most `PARSE_MAX_SECONDS` (+1 s, so the parse's own time check speaks first when
  it can), polling `cancelled()` every half second; past the deadline, or when cancelled, it kills the
  helper's process group (helper and child) and the next document starts a new helper.

A parse over its memory ends as `ParseLimitExceeded("parsing needed more than N MiB (limit)")`, over
its time as `ParseLimitExceeded("parsing took longer than N s (limit)")`, a cancelled one as
`ParseCancelled`; the worker itself is never at risk. Linux (fork, RLIMIT_AS, /proc); `PARSE_ISOLATED=0`
parses in the calling process (the in-parse limits still hold).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kb.parsing import ParsedDocument, ParseError, ParseLimitExceeded, ParseLimits, Section, parse
from tenants.conf import product_settings

ROOT = Path(__file__).resolve().parents[1]
GRACE_SECONDS = 1.0  # past the parse's own time limit before it is killed
POLL_SECONDS = 0.5  # how often a running parse asks `cancelled()`
_MiB = 1024 * 1024
_FRAME = struct.Struct(">Q")


class ParseCancelled(Exception):
    """The parse was stopped because its caller no longer wants it (e.g. the document was deleted)."""


@dataclass(frozen=True)
class ParseRun:
    """How a sandboxed parse went: wall seconds seen by the caller, the child's peak RSS."""

    seconds: float
    peak_rss_bytes: int
    started_helper: bool


def parse_document(data: bytes, filename: str, mime_type: str | None = None, *,
                   cancelled: Callable[[], bool] | None = None) -> ParsedDocument:
    """`kb.parsing.parse` under the configured limits (PARSE_MAX_SECONDS, PARSE_MAX_MEMORY_MB), in a child
    process unless PARSE_ISOLATED is off. Raises ParseError (ParseLimitExceeded over a limit) or ParseCancelled."""
    limits = ParseLimits(max_seconds=float(product_settings.PARSE_MAX_SECONDS))
    if not product_settings.PARSE_ISOLATED:
        return parse(data, filename, mime_type, limits=limits)
    return parse_isolated(data, filename, mime_type, limits=limits, max_memory_mb=product_settings.PARSE_MAX_MEMORY_MB,
                          cancelled=cancelled)[0]


def parse_isolated(data: bytes, filename: str, mime_type: str | None = None, *, limits: ParseLimits, max_memory_mb: int,
                   cancelled: Callable[[], bool] | None = None) -> tuple[ParsedDocument, ParseRun]:
    """Parse in a fresh child of this process's helper (module docstring); thread-safe (one parse at a time
    per process). Raises like `parse_document`."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ParseError(f"document data must be bytes, got {type(data).__name__}")
    header = json.dumps({"filename": filename, "mime_type": mime_type, "limits": dataclasses.asdict(limits),
                         "max_memory_mb": max_memory_mb}).encode()
    with _lock:
        started = time.monotonic()
        helper, fresh = _helper_for_this_process()
        try:
            try:
                helper.send(header, bytes(data))
            except OSError:  # the helper died between two documents: one new one, once
                helper.kill()
                helper, fresh = _helper_for_this_process()
                helper.send(header, bytes(data))
            status, payload = _wait(helper, started + limits.max_seconds + GRACE_SECONDS, limits, cancelled)
        except BaseException:
            # Over a limit, cancelled, or anything else while a request is in flight (a failing `cancelled`, the
            # task's own time limit): the helper would answer this request to the next caller, so it goes.
            helper.kill()
            raise
        run = ParseRun(time.monotonic() - started, int(status.get("peak_kib", 0)) * 1024, fresh)
    return _result(status, payload, limits, max_memory_mb), run


def _wait(helper: _Helper, deadline: float, limits: ParseLimits,
          cancelled: Callable[[], bool] | None) -> tuple[dict[str, Any], bytes]:
    while not helper.ready(min(POLL_SECONDS, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            raise ParseLimitExceeded(f"parsing took longer than {limits.max_seconds:g} s (limit)")
        if cancelled is not None and cancelled():
            raise ParseCancelled("the parse was cancelled")
    try:
        return helper.receive()
    except (OSError, EOFError, ValueError) as exc:
        raise ParseError(f"the parse process failed: {exc}") from None


def _result(status: dict[str, Any], payload: bytes, limits: ParseLimits, max_memory_mb: int) -> ParsedDocument:
    signum = status.get("signal")
    if signum == signal.SIGXCPU:  # RLIMIT_CPU, which only a child nobody killed reaches
        raise ParseLimitExceeded(f"parsing took longer than {limits.max_seconds:g} s (limit)")
    if signum is not None or not payload:
        name = signal.Signals(signum).name if signum is not None else f"exit status {status.get('code')}"
        raise ParseError(f"the parser crashed ({name}); the memory limit is {max_memory_mb} MiB")
    try:
        out = json.loads(payload.decode("utf-8", "surrogatepass"))
        kind = out["kind"]
        if kind == "ok":
            sections = tuple(Section(int(start), int(end), tuple(path), page) for start, end, path, page in out["sections"])
            return ParsedDocument(text=str(out["text"]), title=str(out["title"]), mime_type=str(out["mime_type"]), sections=sections)
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"the parse process returned an unreadable result: {type(exc).__name__}") from None
    if kind == "memory":
        raise ParseLimitExceeded(f"parsing needed more than {max_memory_mb} MiB (limit)")
    if kind == "limit":
        raise ParseLimitExceeded(out["message"])
    if kind == "error":
        raise ParseError(out["message"])
    raise ParseError(f"the parser failed: {out.get('message', kind)}")


# ---------------------------------------------------------------------------------------------
# The caller's side of the helper


class _Helper:
    """The helper process, in a process group of its own (it and its child are killed together)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.proc = subprocess.Popen([sys.executable, "-m", "kb.parse_sandbox"], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, start_new_session=True)
        # Both PIPE, so never None.
        self.requests: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        self.replies: IO[bytes] = self.proc.stdout  # type: ignore[assignment]

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def send(self, header: bytes, data: bytes) -> None:
        self.requests.write(_FRAME.pack(len(header)) + header)
        self.requests.write(_FRAME.pack(len(data)))
        self.requests.write(data)
        self.requests.flush()

    def ready(self, timeout: float) -> bool:
        return bool(select.select([self.replies.fileno()], [], [], timeout)[0])

    def receive(self) -> tuple[dict[str, Any], bytes]:
        status = json.loads(_read_frame(self.replies))
        return status, _read_frame(self.replies)

    def kill(self) -> None:
        if self.owner != os.getpid():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # its pid is its group's id; not reaped yet, so not reused
        self.proc.wait()
        for pipe in (self.requests, self.replies):
            with contextlib.suppress(OSError):
                pipe.close()


_lock = threading.Lock()
_helper: _Helper | None = None


def start_helper() -> None:
    """Start this process's helper now (a worker's warm-up), so its first document does not wait for it;
    nothing when parses are not isolated."""
    if product_settings.PARSE_ISOLATED:
        with _lock:
            _helper_for_this_process()


def _helper_for_this_process() -> tuple[_Helper, bool]:
    """This process's helper, started if there is none or it died (a forked process starts its own)."""
    global _helper
    if _helper is not None and _helper.alive():
        return _helper, False
    if _helper is not None:
        _helper.kill()
    _helper = _Helper()
    return _helper, True


def _read_frame(stream: IO[bytes]) -> bytes:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        raise EOFError("the parse process closed its pipe")
    (size,) = _FRAME.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError("the parse process closed its pipe mid-message")
    return body


def _write_frame(fd: int, payload: bytes) -> None:
    view = memoryview(_FRAME.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------------------------------------
# The helper and its children


def _serve() -> None:
    """Helper loop: read a request, fork a child to parse it, wait for it, reply; exit when the caller goes."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the replies
    requests = sys.stdin.buffer
    while True:
        try:
            header, data = _read_frame(requests), _read_frame(requests)
        except EOFError:
            return
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (read_end, out_fd, 0):  # the child talks to nobody but its result pipe
                os.close(fd)
            _child(write_end, header, data)  # never returns
        os.close(write_end)
        del data
        with os.fdopen(read_end, "rb") as results:
            payload = results.read()
        _, wait_status, usage = os.wait4(pid, 0)
        status: dict[str, Any] = {"peak_kib": usage.ru_maxrss}
        if os.WIFSIGNALED(wait_status):
            status["signal"], payload = os.WTERMSIG(wait_status), b""
        elif os.WEXITSTATUS(wait_status) != 0:
            status["code"], payload = os.WEXITSTATUS(wait_status), b""
        try:
            _write_frame(out_fd, json.dumps(status).encode())
            _write_frame(out_fd, payload)
        except BrokenPipeError:
            return


def _child(write_end: int, header: bytes, data: bytes) -> None:
    """Cap this process, parse, write the JSON result, exit without running the helper's exit handlers."""
    base = _vm("VmSize")
    allowed = 0
    try:
        request = json.loads(header)
        limits = ParseLimits(**request["limits"])
        allowed = int(request["max_memory_mb"]) * _MiB
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        cap = base + allowed if hard == resource.RLIM_INFINITY else min(base + allowed, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        cpu = int(limits.max_seconds + 2 * GRACE_SECONDS) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        doc = parse(data, request["filename"], request["mime_type"], limits=limits)
        del data
        out: dict[str, Any] = {"kind": "ok", "text": doc.text, "title": doc.title, "mime_type": doc.mime_type,
                               "sections": [[s.char_start, s.char_end, list(s.heading_path), s.page] for s in doc.sections]}
        payload = json.dumps(out, ensure_ascii=False).encode("utf-8", "surrogatepass")
    except MemoryError:
        payload = b'{"kind": "memory"}'
    except ParseLimitExceeded as exc:
        payload = json.dumps({"kind": "limit", "message": str(exc)}).encode()
    except BaseException as exc:  # a ParseError, or a bug in a parser: the document fails with it, the worker is unaffected
        if allowed and _vm("VmPeak") - base > allowed // 2:
            # A C library that fails an allocation says so in its own words (lxml: "XMLSyntaxError: unknown
            # error"); a failure after growing past half the cap is the cap's doing (doubling buffers).
            payload = b'{"kind": "memory"}'
        elif isinstance(exc, ParseError):
            payload = json.dumps({"kind": "error", "message": str(exc)}).encode()
        else:
            payload = json.dumps({"kind": "crash", "message": f"{type(exc).__name__}: {exc}"}).encode()
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(write_end, view):]
    finally:
        os._exit(0)


def _vm(field: str) -> int:
    """This process's virtual size (VmSize) or its peak (VmPeak) in bytes; 0 without /proc."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith(field + ":"))
    except (OSError, StopIteration, ValueError):
        return 0


if __name__ == "__main__":
    _serve()
