"""A local stand-in for the Gemini embeddings endpoint, driven by the real google-genai SDK.

Answers POST /v1/models/<model>:batchEmbedContents (and /v1beta/) with deterministic vectors,
records every request, and can be scripted to fail: `fail_next(429, times=2)`, `fail_next(500)`,
`fail_next(400)`, `wrong_count_next()`. Binds 127.0.0.1:0 and runs in a daemon thread.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_PATH = re.compile(r"^/(v1|v1beta)/models/([^/:]+):batchEmbedContents$")


def fake_vector(text: str, dim: int, scale: float = 3.0) -> list[float]:
    """Deterministic, deliberately NOT unit-length (as gemini-embedding-001 below 3072 dims)."""
    out: list[float] = []
    counter = 0
    while len(out) < dim:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((v / 65535.0 - 0.5) * scale for v in struct.unpack("<16H", digest))
        counter += 1
    return out[:dim]


@dataclass
class RecordedRequest:
    api_version: str
    model: str
    texts: list[str]
    task_types: list[str | None]
    dims: list[int | None]


@dataclass
class _Script:
    failures: list[tuple[int, str]] = field(default_factory=list)  # (status, message), consumed in order
    wrong_count: int = 0


class FakeGeminiEmbed:
    """Context manager: `with FakeGeminiEmbed() as fake: fake.base_url ...`."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.attempts = 0  # every HTTP request, failed ones included
        self._script = _Script()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # --- scripting ------------------------------------------------------------------------------
    def fail_next(self, status: int, times: int = 1, message: str = "scripted failure") -> None:
        with self._lock:
            self._script.failures.extend([(status, message)] * times)

    def wrong_count_next(self, times: int = 1) -> None:
        with self._lock:
            self._script.wrong_count += times

    @property
    def batch_sizes(self) -> list[int]:
        return [len(r.texts) for r in self.requests]

    # --- server ---------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeGeminiEmbed:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload = fake._answer(self.path.split("?")[0], body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _answer(self, path: str, body: dict) -> tuple[int, dict]:
        match = _PATH.match(path)
        if not match:
            return 404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}}
        with self._lock:
            self.attempts += 1
            if self._script.failures:
                status, message = self._script.failures.pop(0)
                return status, {"error": {"code": status, "message": message, "status": "SCRIPTED"}}
            wrong = self._script.wrong_count > 0
            if wrong:
                self._script.wrong_count -= 1
        requests = body.get("requests", [])
        texts = ["".join(p.get("text", "") for p in r.get("content", {}).get("parts", [])) for r in requests]
        dims = [r.get("outputDimensionality") for r in requests]
        with self._lock:
            self.requests.append(RecordedRequest(match.group(1), match.group(2), texts,
                                                 [r.get("taskType") for r in requests], dims))
        if len(requests) > 100:
            return 400, {"error": {"code": 400, "message": "at most 100 requests per batch", "status": "INVALID_ARGUMENT"}}
        vectors = [{"values": fake_vector(t, d or 3072)} for t, d in zip(texts, dims, strict=True)]
        if wrong:
            vectors = vectors[:-1]
        return 200, {"embeddings": vectors}
