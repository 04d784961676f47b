"""An OpenAI-compatible chat completions endpoint (Ollama, vLLM, llama.cpp server) over httpx.

Tools go out in OpenAI format; `tool_choice: "none"` when tools are disabled. Tool call arguments
arrive as a JSON string: unparseable ones become a ToolCall with `arguments_error`, which the
loop turns into an error message the model can correct.

Every call is bounded: `max_tokens` is the request's output cap, and the reply is streamed
(`stream: true`) so that a call still running at the request's deadline is abandoned by closing
its connection, which is what makes a server stop generating. No read waits past the deadline
either. A server that answers a streamed request with one JSON body is read as such. The reply's
text pieces go to `request.on_text` as they arrive: the chat shows the answer token by token.
`finish_reason` is kept on the turn ("length" = cut off).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

from agents.messages import AssistantMessage, ModelTurn, ProviderError, ToolCall, ToolResultMessage, Usage, UserMessage
from agents.providers.retry import check_reply_deadline, time_left, with_retries
from tenants.conf import product_settings

if TYPE_CHECKING:  # annotations only
    from agents.messages import Message, ModelRequest


class _RetryableStatus(Exception):
    pass


class _Cut(Exception):
    """The stream ended before the server said it was finished (connection closed mid-reply)."""


def _retryable(exc: Exception) -> bool:
    return isinstance(exc, _RetryableStatus | _Cut | httpx.TransportError | ValueError | KeyError | IndexError)


class OpenAICompatProvider:
    name = "openai"

    def __init__(self, *, base_url: str, model: str, api_key: str = "", timeout_s: float = 120.0, max_attempts: int = 4,
                 backoff_s: float = 1.0, temperature: float = 0.2, sleep: Callable[[float], None] = time.sleep,
                 transport: httpx.BaseTransport | None = None, stream: bool = True) -> None:
        if not base_url or not model:
            raise ProviderError("OPENAI_COMPAT_BASE_URL and OPENAI_COMPAT_MODEL must be set")
        self.model, self.timeout_s, self.stream = model, timeout_s, stream
        self.endpoint = base_url.rstrip("/")
        self.max_attempts, self.backoff_s, self.sleep, self.temperature = max_attempts, backoff_s, sleep, temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport)

    @classmethod
    def from_settings(cls, **overrides: Any) -> OpenAICompatProvider:
        return cls(**{"base_url": product_settings.OPENAI_COMPAT_BASE_URL, "model": product_settings.OPENAI_COMPAT_MODEL,
                      "api_key": product_settings.OPENAI_COMPAT_API_KEY, **overrides})

    def generate(self, request: ModelRequest) -> ModelTurn:
        """One turn. Raises ProviderError after retries, DeadlineExceeded when the deadline cuts the call."""
        body: dict[str, Any] = {"model": self.model, "temperature": self.temperature,
                                "messages": [{"role": "system", "content": request.system}, *to_openai_messages(request.messages)]}
        if request.max_output_tokens:
            body["max_tokens"] = int(request.max_output_tokens)
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                             for t in request.tools]
            body["tool_choice"] = "auto" if request.tools_enabled else "none"

        def call() -> dict:
            timeout = call_timeout(self.timeout_s, request.deadline)
            with self.client.stream("POST", "/chat/completions", json=body, timeout=timeout) as response:
                if response.status_code == 429 or response.status_code >= 500:
                    raise _RetryableStatus(f"HTTP {response.status_code}: {response.read()[:200]!r}")
                if response.status_code >= 400:
                    raise ProviderError(f"openai-compatible endpoint refused the request: HTTP {response.status_code}: "
                                        f"{response.read()[:300]!r}")
                if "text/event-stream" in response.headers.get("content-type", ""):
                    data = read_stream(response, request.deadline, request.on_text)
                else:
                    data = json.loads(response.read())
            data["choices"][0]["message"]  # noqa: B018 - a reply without a message is garbled: retry
            return data

        data = with_retries(call, attempts=self.max_attempts, backoff_s=self.backoff_s, classify=_retryable, sleep=self.sleep,
                            deadline=request.deadline, what=f"openai-compatible {self.model}")
        return from_openai(data)


def call_timeout(timeout_s: float, deadline: float | None) -> httpx.Timeout:
    """The call's httpx timeouts: `timeout_s`, never past `deadline`; DeadlineExceeded when none is left."""
    left = time_left(timeout_s, deadline)
    return httpx.Timeout(left, connect=min(left, 10.0))


def read_stream(response: httpx.Response, deadline: float | None, on_text: Callable[[str], None] | None = None) -> dict:
    """A streamed chat completion assembled into the non-streamed shape ({"choices": [{"message", "finish_reason"}], "usage"}).

    Stops reading at `deadline` (the caller's `with` then closes the connection): DeadlineExceeded.
    A stream that ends before a finish_reason or [DONE] was cut: _Cut (retryable). `on_text`
    receives each piece of the reply's text as it arrives (agents.streaming; a retried call sends its
    text again, which the caller's TextStream.finish sets right with a reset).
    """
    content: list[str] = []
    calls: dict[int, dict] = {}
    finish, usage, done = None, None, False
    for line in response.iter_lines():
        check_reply_deadline(deadline)
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            break
        chunk = json.loads(payload)
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            if delta.get("content"):
                content.append(delta["content"])
                if on_text is not None:
                    on_text(delta["content"])
            for i, tc in enumerate(delta.get("tool_calls") or []):
                slot = calls.setdefault(tc.get("index", i), {"id": None, "function": {"name": "", "arguments": ""}})
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                args = fn.get("arguments")
                if isinstance(args, dict):
                    slot["function"]["arguments"] = args
                elif args:
                    slot["function"]["arguments"] += args
            finish = choice.get("finish_reason") or finish
    if not done and finish is None:
        raise _Cut("the stream ended before the reply was finished")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"choices": [{"message": message, "finish_reason": finish}], "usage": usage or {}}


def to_openai_messages(messages: tuple[Message, ...] | list[Message]) -> list[dict]:
    out: list[dict] = []
    for m in messages:
        if isinstance(m, UserMessage):
            out.append({"role": "user", "content": m.text})
        elif isinstance(m, AssistantMessage):
            item: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                item["tool_calls"] = [{"id": c.id, "type": "function",
                                       "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in m.tool_calls]
            out.append(item)
        elif isinstance(m, ToolResultMessage):
            out.append({"role": "tool", "tool_call_id": m.call_id, "name": m.name, "content": json.dumps(m.content, default=str)})
    return out


def from_openai(data: dict) -> ModelTurn:
    message = data["choices"][0]["message"] or {}
    calls = []
    for i, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") or {}
        raw = fn.get("arguments")
        args, problem = {}, None
        if isinstance(raw, dict):
            args = raw
        elif raw:
            try:
                parsed = json.loads(raw)
                args, problem = (parsed, None) if isinstance(parsed, dict) else ({}, "arguments must be a JSON object")
            except json.JSONDecodeError as exc:
                problem = f"invalid JSON ({exc.msg} at position {exc.pos})"
        calls.append(ToolCall(id=tc.get("id") or f"call-{i}", name=fn.get("name", ""), arguments=args, arguments_error=problem))
    usage = data.get("usage") or {}
    return ModelTurn(text=(message.get("content") or "").strip(), tool_calls=tuple(calls),
                     usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
                     finish_reason=_FINISH.get(data["choices"][0].get("finish_reason") or "", "other" if data["choices"][0].get(
                         "finish_reason") else ""))


_FINISH: dict[str, Any] = {"stop": "stop", "tool_calls": "tool_calls", "function_call": "tool_calls", "length": "length"}
