"""A misbehaving OpenAI-compatible chat completions server for tests (http.server on 127.0.0.1:0, in a thread).

The provider's real httpx client talks to it, streamed or not. It is driven by a script of replies;
a reply is a dict made by the helpers below, or a callable taking the request body and returning one:

    reply("text")                       a complete answer (finish_reason "stop")
    reply("cut off", finish="length")  a reply the output cap cut
    tool_calls(("search", '{"query": "hotel"}'))   raw argument strings, so malformed JSON can be sent
    echo()                              the last user message back, as a tiny model does
    slow(seconds, reply(...))           waits before answering
    never_stops()                       streams tokens until the client goes (or, unstreamed, for `forever_s`)
    close_connection()                  drops the socket without a reply
    status(503)

Like a llama.cpp server with one slot, it generates one reply at a time (`single_slot`), so a reply
nobody stopped delays every request after it. `drop_system=True` / `ignore_tools=True` model a chat
template that loses the system message and the tool declarations: the script's callables receive
the body as the model would see it. `read_chars_per_s` models prompt processing: before replying,
the server reads the prompt silently at that speed (writing nothing, so it cannot notice a client
that left) and reports prompt_tokens as characters / 4. Counters: `active` (replies being generated), `abandoned`
(replies whose client closed the connection mid-stream), `last_idle` (monotonic time the server
last became idle).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = dict[str, Any]
ScriptItem = Reply | Callable[[dict], Reply]


def reply(content: str, *, finish: str = "stop", prompt_tokens: int = 50, completion_tokens: int = 10) -> Reply:
    return {"content": content, "finish": finish, "usage": (prompt_tokens, completion_tokens)}


def tool_calls(*calls: tuple[str, str], finish: str = "tool_calls") -> Reply:
    """Tool calls whose arguments are sent verbatim (a string that need not be valid JSON)."""
    return {"content": None, "finish": finish, "usage": (50, 10),
            "tool_calls": [{"id": f"call-{i}", "type": "function", "function": {"name": name, "arguments": args}}
                           for i, (name, args) in enumerate(calls)]}


def last_user_text(body: dict) -> str:
    users = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") in ("user", "tool")]
    return users[-1] if users else ""


def prompt_chars(body: dict) -> int:
    """Characters of the messages and tool declarations a model reads."""
    text = sum(len(m.get("content") or "") for m in body.get("messages", []))
    return text + (len(json.dumps(body["tools"])) if body.get("tools") else 0)


def echo(body: dict) -> Reply:
    return reply(last_user_text(body)[:400])


def slow(seconds: float, item: Reply) -> Reply:
    return {**item, "delay": seconds}


def never_stops(piece: str = "and so on ", interval: float = 0.02, forever_s: float = 30.0) -> Reply:
    return {"forever": piece, "interval": interval, "forever_s": forever_s}


def close_connection() -> Reply:
    return {"close": True}


def status(code: int) -> Reply:
    return {"status": code}


class FakeOpenAI:
    def __init__(self, script: list[ScriptItem], *, when_exhausted: ScriptItem | None = None, single_slot: bool = True,
                 drop_system: bool = False, ignore_tools: bool = False, read_chars_per_s: float | None = None) -> None:
        self.script = list(script)
        self.read_chars_per_s = read_chars_per_s
        self.when_exhausted = when_exhausted or reply("fake script exhausted")
        self.single_slot, self.drop_system, self.ignore_tools = single_slot, drop_system, ignore_tools
        self.requests: list[dict] = []
        self.active = 0
        self.abandoned = 0
        self.read_for_nobody = 0  # prompts read to the end after their client had gone (read_chars_per_s)
        self.last_idle = time.monotonic()
        self.slot = threading.Lock()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def seen_by_model(self, body: dict) -> dict:
        """The request as the model sees it once the chat template has dropped what this server drops."""
        body = dict(body)
        if self.drop_system:
            body["messages"] = [m for m in body.get("messages", []) if m.get("role") != "system"]
        if self.ignore_tools:
            body.pop("tools", None)
            body.pop("tool_choice", None)
        return body

    def next_reply(self, body: dict) -> Reply:
        with self._lock:
            item = self.script.pop(0) if self.script else self.when_exhausted
        out = item(self.seen_by_model(body)) if callable(item) else item
        if self.ignore_tools and out.get("tool_calls"):
            out = reply(last_user_text(body)[:400])  # a model that never saw the tools never calls them
        return out

    def idle_within(self, seconds: float) -> bool:
        """True once no reply is being generated, waiting up to `seconds`."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.active == 0:
                return True
            time.sleep(0.01)
        return self.active == 0

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                with fake._lock:
                    fake.requests.append(body)
                if fake.single_slot:
                    with fake.slot:
                        self._generate(body)
                else:
                    self._generate(body)

            def _generate(self, body: dict) -> None:
                with fake._lock:
                    fake.active += 1
                try:
                    if fake.read_chars_per_s:
                        time.sleep(prompt_chars(body) / fake.read_chars_per_s)
                        if self._client_left():
                            with fake._lock:
                                fake.read_for_nobody += 1
                    self._reply(body)
                except OSError:  # the client went before the reply was written (e.g. its deadline passed)
                    self.close_connection = True
                finally:
                    with fake._lock:
                        fake.active -= 1
                        fake.last_idle = time.monotonic()

            def _client_left(self) -> bool:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)

            def _reply(self, body: dict) -> None:
                item = fake.next_reply(body)
                if item.get("delay"):
                    time.sleep(item["delay"])
                if item.get("close"):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if "status" in item:
                    return self._send(item["status"], {"error": {"message": "fake error"}})
                streamed = bool(body.get("stream"))
                if "forever" in item:
                    return self._forever(item, streamed)
                prompt, completion = item.get("usage", (0, 0))
                if fake.read_chars_per_s:
                    prompt = prompt_chars(body) // 4
                message: dict[str, Any] = {"role": "assistant", "content": item.get("content")}
                if item.get("tool_calls"):
                    message["tool_calls"] = item["tool_calls"]
                usage = {"prompt_tokens": prompt, "completion_tokens": completion}
                if not streamed:
                    return self._send(200, {"choices": [{"index": 0, "message": message, "finish_reason": item["finish"]}],
                                            "usage": usage})
                events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}]
                content = item.get("content") or ""
                for start in range(0, len(content), 16):
                    events.append({"choices": [{"index": 0, "delta": {"content": content[start:start + 16]}, "finish_reason": None}]})
                for i, call in enumerate(item.get("tool_calls") or []):
                    events.append({"choices": [{"index": 0, "delta": {"tool_calls": [{**call, "index": i}]}, "finish_reason": None}]})
                events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": item["finish"]}]})
                events.append({"choices": [], "usage": usage})
                data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _forever(self, item: Reply, streamed: bool) -> None:
                if not streamed:  # nothing to write until it is done: it cannot notice the client leaving
                    time.sleep(item["forever_s"])
                    return self._send(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": item["forever"]},
                                                         "finish_reason": "length"}]})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                event = {"choices": [{"index": 0, "delta": {"content": item["forever"]}, "finish_reason": None}]}
                line = f"data: {json.dumps(event)}\n\n".encode()
                try:
                    while True:
                        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                        self.wfile.flush()
                        time.sleep(item["interval"])
                except OSError:  # the client closed the connection: stop generating
                    with fake._lock:
                        fake.abandoned += 1
                    self.close_connection = True

            def _send(self, code: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
