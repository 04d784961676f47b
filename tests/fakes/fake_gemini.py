"""A local stand-in for the Gemini `:generateContent` endpoint, driven by a script of model turns.

The real google-genai SDK talks to it (GEMINI_BASE_URL / http_options.base_url), so tests cover
the SDK's request and response handling too. Serves /v1beta/ and /v1/ paths on 127.0.0.1:0 in a
thread and records every request body.

    with FakeGemini([calls(("search", {"query": "hotel"})), lambda req: text(f"... [c:{id}]")]) as fake:
        provider = GeminiProvider(api_key="test", model="gemini-test", base_url=fake.base_url, backoff_s=0)

A script item is a turn (`text`, `calls`), an error (`status(429)`), a broken body (`malformed()`),
or a callable taking the request body and returning one of those.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Turn = dict[str, Any]
ScriptItem = Turn | Callable[[dict], Turn]

_PATH = re.compile(r"^/(v1beta|v1)/models/([^/:]+):generateContent$")


def text(value: str, *, prompt_tokens: int = 100, output_tokens: int = 20) -> Turn:
    return {"parts": [{"text": value}], "usage": (prompt_tokens, output_tokens)}


def calls(*items: tuple[str, Any], prompt_tokens: int = 100, output_tokens: int = 10, with_ids: bool = True) -> Turn:
    """Function calls in one turn (several = parallel calls). Args may be any JSON value, to test bad ones."""
    parts = []
    for i, (name, args) in enumerate(items):
        fc: dict[str, Any] = {"name": name, "args": args}
        if with_ids:
            fc["id"] = f"fc-{i}-{name}"
        parts.append({"functionCall": fc})
    return {"parts": parts, "usage": (prompt_tokens, output_tokens)}


def status(code: int, message: str = "fake error") -> Turn:
    return {"status": code, "message": message}


def malformed() -> Turn:
    return {"raw": '{"candidates": [ {"content": '}


class FakeGemini:
    def __init__(self, script: list[ScriptItem], *, when_exhausted: ScriptItem | None = None) -> None:
        self.script = list(script)
        self.when_exhausted = when_exhausted or text("fake script exhausted")
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeGemini:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_turn(self, body: dict) -> Turn:
        with self._lock:
            item = self.script.pop(0) if self.script else self.when_exhausted
        return item(body) if callable(item) else item

    # --- helpers for assertions ---

    def function_responses(self, request_index: int = -1) -> list[dict]:
        """functionResponse parts sent in one recorded request."""
        body = self.requests[request_index]
        return [p["functionResponse"] for c in body.get("contents", []) for p in c.get("parts", []) if "functionResponse" in p]

    def tool_modes(self) -> list[str | None]:
        return [((b.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode") for b in self.requests]

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not _PATH.match(self.path.split("?")[0]):
                    return self._send(404, {"error": {"code": 404, "message": f"no route {self.path}", "status": "NOT_FOUND"}})
                body = json.loads(raw or b"{}")
                with fake._lock:
                    fake.requests.append(body)
                    fake.paths.append(self.path)
                turn = fake.next_turn(body)
                if "status" in turn:
                    code = turn["status"]
                    return self._send(code, {"error": {"code": code, "message": turn.get("message", ""), "status": "UNAVAILABLE"}})
                if "raw" in turn:
                    return self._send_bytes(200, turn["raw"].encode())
                prompt, output = turn.get("usage", (0, 0))
                payload = {
                    "candidates": [{"content": {"role": "model", "parts": turn["parts"]}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": output, "totalTokenCount": prompt + output},
                    "modelVersion": "fake-gemini",
                }
                return self._send(200, payload)

            def _send(self, code: int, payload: dict) -> None:
                self._send_bytes(code, json.dumps(payload).encode())

            def _send_bytes(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
