"""A local stand-in for the Gemini `:generateContent` endpoint, driven by a script of model turns.

The real google-genai SDK talks to it (GEMINI_BASE_URL / http_options.base_url), so tests cover
the SDK's request and response handling too. Serves /v1beta/ and /v1/ paths on 127.0.0.1:0 in a
thread and records every request body.

    with FakeGemini([calls(("search", {"query": "hotel"})), lambda req: text(f"... [c:{id}]")]) as fake:
        provider = GeminiProvider(api_key="test", model="gemini-test", base_url=fake.base_url, backoff_s=0)

A script item is a turn (`text`, `calls`), an error (`status(429)`), a broken body (`malformed()`),
or a callable taking the request body and returning one of those. Misbehaviours: `cut_off(turn)`
(finish reason MAX_TOKENS), `slow(seconds, turn)`, `never_stops()` (streams text until the
client goes), `close_connection()` (drops the socket without a reply), `echo` (the last user turn
back, as a tiny model does). `streamGenerateContent` is served as SSE, one event per chunk as the
API streams them (`stream_chunks`: text in `chunk_chars` pieces, usage and finish reason on the last),
`paced(seconds, turn)` spacing them; `fails_mid_stream(turn)` ends with an error event,
`drops_mid_stream(turn)` with a closed connection, each after some chunks. `single_slot=True` makes
the server generate one reply at a time, like a self-hosted server with one slot, so a reply
nobody stopped delays the next request. As in tests.fakes.fake_openai, `drop_system=True` /
`ignore_tools=True` model a server that loses the system instruction and the function
declarations: the script's callables receive the body as the model would see it, and a model
that never saw the tools answers with `echo` where its script would call one.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.fake_openai import FakeOpenAI

Turn = dict[str, Any]
ScriptItem = Turn | Callable[[dict], Turn]

_PATH = re.compile(r"^/(v1beta|v1)/models/([^/:]+):(generateContent|streamGenerateContent)$")


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


def last_user_text(body: dict) -> str:
    """The last user turn's text (a function response as its JSON), what an echoing model repeats."""
    users = [c for c in body.get("contents", []) if c.get("role") == "user"]
    parts = users[-1].get("parts", []) if users else []
    return "\n".join(p["text"] if "text" in p else json.dumps(p["functionResponse"].get("response"))
                     for p in parts if "text" in p or "functionResponse" in p)


def system_text(body: dict) -> str:
    return "\n".join(p.get("text", "") for p in (body.get("systemInstruction") or {}).get("parts", []))


def declared_tools(body: dict) -> set[str]:
    return {d["name"] for t in body.get("tools", []) for d in t.get("functionDeclarations", [])}


def function_responses(body: dict) -> list[dict]:
    """functionResponse parts sent in one request."""
    return [p["functionResponse"] for c in body.get("contents", []) for p in c.get("parts", []) if "functionResponse" in p]


def echo(body: dict) -> Turn:
    return text(last_user_text(body)[:400])


def status(code: int, message: str = "fake error") -> Turn:
    return {"status": code, "message": message}


def malformed() -> Turn:
    return {"raw": '{"candidates": [ {"content": '}


def cut_off(turn: Turn) -> Turn:
    """The turn, ended with finish reason MAX_TOKENS (the output cap cut it)."""
    return {**turn, "finish": "MAX_TOKENS"}


def slow(seconds: float, turn: Turn) -> Turn:
    return {**turn, "delay": seconds}


def never_stops(piece: str = "and so on ", interval: float = 0.02) -> Turn:
    """Streams `piece` every `interval` seconds until the client closes the connection."""
    return {"forever": piece, "interval": interval}


def close_connection() -> Turn:
    return {"close": True}


def paced(seconds: float, turn: Turn) -> Turn:
    """The turn's streamed chunks `seconds` apart, as a model generating them."""
    return {**turn, "interval": seconds}


def fails_mid_stream(turn: Turn, *, after: int = 1, code: int = 503) -> Turn:
    """Streams `after` chunks of the turn, then an error event ({"error": {"code": ...}}), as the API does."""
    return {**turn, "fail_after": after, "fail_code": code}


def drops_mid_stream(turn: Turn, *, after: int = 1) -> Turn:
    """Streams `after` chunks of the turn, then closes the connection (no finish reason ever sent)."""
    return {**turn, "drop_after": after}


def stream_chunks(turn: Turn, chunk_chars: int) -> list[dict]:
    """The turn as streamGenerateContent chunks, as the API streams them: text in pieces of `chunk_chars`
    (0: whole), a function call whole in its own chunk, the finish reason and the full usage on the last
    chunk (earlier ones report the prompt's tokens only)."""
    parts: list[dict] = []
    for part in turn["parts"]:
        value = part.get("text")
        if value and chunk_chars > 0 and set(part) == {"text"}:
            parts += [{"text": value[i:i + chunk_chars]} for i in range(0, len(value), chunk_chars)]
        else:
            parts.append(part)
    prompt, output = turn.get("usage", (0, 0))
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}],
               "usageMetadata": {"promptTokenCount": prompt}, "modelVersion": "fake-gemini"} for p in parts or [{"text": ""}]]
    chunks[-1]["candidates"][0]["finishReason"] = turn.get("finish", "STOP")
    chunks[-1]["usageMetadata"] = {"promptTokenCount": prompt, "candidatesTokenCount": output, "totalTokenCount": prompt + output}
    return chunks


class FakeGemini:
    def __init__(self, script: list[ScriptItem], *, when_exhausted: ScriptItem | None = None, single_slot: bool = False,
                 drop_system: bool = False, ignore_tools: bool = False, chunk_chars: int = 16) -> None:
        self.script = list(script)
        self.chunk_chars = chunk_chars  # streamed text arrives in pieces of this many characters (0: whole)
        self.single_slot, self.drop_system, self.ignore_tools = single_slot, drop_system, ignore_tools
        self.slot = threading.Lock()
        self.active = 0  # replies being generated right now
        self.abandoned = 0  # replies the client stopped reading (connection closed mid-stream)
        self.last_idle = time.monotonic()
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

    def seen_by_model(self, body: dict) -> dict:
        """The request as the model sees it once the server has dropped what it drops."""
        body = dict(body)
        if self.drop_system:
            body.pop("systemInstruction", None)
        if self.ignore_tools:
            body.pop("tools", None)
            body.pop("toolConfig", None)
        return body

    def next_turn(self, body: dict) -> Turn:
        with self._lock:
            item = self.script.pop(0) if self.script else self.when_exhausted
        turn = item(self.seen_by_model(body)) if callable(item) else item
        if self.ignore_tools and any("functionCall" in p for p in turn.get("parts", [])):
            turn = echo(body)  # a model that never saw the tools never calls them
        return turn

    idle_within = FakeOpenAI.idle_within  # the same `active` counter, so the same wait

    # --- helpers for assertions ---

    def function_responses(self, request_index: int = -1) -> list[dict]:
        """functionResponse parts sent in one recorded request."""
        return function_responses(self.requests[request_index])

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
                if fake.single_slot:
                    with fake.slot:
                        return self._generate(body)
                return self._generate(body)

            def _generate(self, body: dict) -> None:
                with fake._lock:
                    fake.active += 1
                try:
                    self._reply(body)
                except OSError:  # the client went before the reply was written (e.g. its deadline passed)
                    self.close_connection = True
                finally:
                    with fake._lock:
                        fake.active -= 1
                        fake.last_idle = time.monotonic()

            def _reply(self, body: dict) -> None:
                turn = fake.next_turn(body)
                streamed = ":streamGenerateContent" in self.path
                if turn.get("delay"):
                    time.sleep(turn["delay"])
                if turn.get("close"):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if "forever" in turn:
                    return self._forever(turn)
                if "status" in turn:
                    code = turn["status"]
                    return self._send(code, {"error": {"code": code, "message": turn.get("message", ""), "status": "UNAVAILABLE"}})
                if "raw" in turn:
                    return self._send_bytes(200, turn["raw"].encode())
                prompt, output = turn.get("usage", (0, 0))
                payload = {
                    "candidates": [{"content": {"role": "model", "parts": turn["parts"]}, "finishReason": turn.get("finish", "STOP"),
                                    "index": 0}],
                    "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": output, "totalTokenCount": prompt + output},
                    "modelVersion": "fake-gemini",
                }
                if streamed:
                    return self._stream(turn, stream_chunks(turn, fake.chunk_chars))
                return self._send(200, payload)

            def _stream(self, turn: Turn, payloads: list[dict]) -> None:
                """The chunks as SSE events, one write each, `interval` apart; `fail_after` / `drop_after`
                end the stream after that many with an error event / a closed connection."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # no Content-Length: HTTP/1.0, the body ends when the connection closes
                for i, p in enumerate(payloads):
                    if turn.get("drop_after") == i:
                        self.close_connection = True
                        return
                    if turn.get("fail_after") == i:
                        error = {"error": {"code": turn["fail_code"], "message": "fake error mid-stream", "status": "UNAVAILABLE"}}
                        self.wfile.write(f"data: {json.dumps(error)}\r\n\r\n".encode())
                        return
                    if i and turn.get("interval"):
                        time.sleep(turn["interval"])
                    self.wfile.write(f"data: {json.dumps(p)}\r\n\r\n".encode())
                    self.wfile.flush()

            def _forever(self, turn: Turn) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": turn["forever"]}]}, "index": 0}]}
                try:
                    while True:
                        self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
                        self.wfile.flush()
                        time.sleep(turn["interval"])
                except OSError:  # the client closed the connection: stop generating
                    with fake._lock:
                        fake.abandoned += 1
                    self.close_connection = True

            def _send(self, code: int, payload: dict) -> None:
                self._send_bytes(code, json.dumps(payload).encode())

            def _send_bytes(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
