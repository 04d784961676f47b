"""An OpenAI-compatible chat completions endpoint (Ollama, vLLM, llama.cpp server) over httpx.

Tools go out in OpenAI format; `tool_choice: "none"` when tools are disabled. Tool call arguments
arrive as a JSON string: unparseable ones become a ToolCall with `arguments_error`, which the
loop turns into an error message the model can correct.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
from django.conf import settings

from agents.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    ModelTurn,
    ProviderError,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from agents.providers.retry import with_retries


class _RetryableStatus(Exception):
    pass


def _retryable(exc: Exception) -> bool:
    return isinstance(exc, _RetryableStatus | httpx.TransportError | ValueError | KeyError | IndexError)


class OpenAICompatProvider:
    name = "openai"

    def __init__(self, *, base_url: str, model: str, api_key: str = "", timeout_s: float = 120.0, max_attempts: int = 4,
                 backoff_s: float = 1.0, temperature: float = 0.2, sleep: Callable[[float], None] = time.sleep,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not base_url or not model:
            raise ProviderError("OPENAI_COMPAT_BASE_URL and OPENAI_COMPAT_MODEL must be set")
        self.model = model
        self.max_attempts, self.backoff_s, self.sleep, self.temperature = max_attempts, backoff_s, sleep, temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport)

    @classmethod
    def from_settings(cls, **overrides: Any) -> OpenAICompatProvider:
        kwargs: dict[str, Any] = {"base_url": settings.OPENAI_COMPAT_BASE_URL, "model": settings.OPENAI_COMPAT_MODEL,
                                  "api_key": settings.OPENAI_COMPAT_API_KEY}
        kwargs.update(overrides)
        return cls(**kwargs)

    def generate(self, request: ModelRequest) -> ModelTurn:
        body: dict[str, Any] = {"model": self.model, "temperature": self.temperature,
                                "messages": [{"role": "system", "content": request.system}, *to_openai_messages(request.messages)]}
        if request.tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                             for t in request.tools]
            body["tool_choice"] = "auto" if request.tools_enabled else "none"

        def call() -> dict:
            response = self.client.post("/chat/completions", json=body)
            if response.status_code == 429 or response.status_code >= 500:
                raise _RetryableStatus(f"HTTP {response.status_code}: {response.text[:200]}")
            if response.status_code >= 400:
                raise ProviderError(f"openai-compatible endpoint refused the request: HTTP {response.status_code}: {response.text[:300]}")
            data = response.json()
            data["choices"][0]["message"]  # noqa: B018 - a reply without a message is garbled: retry
            return data

        data = with_retries(call, attempts=self.max_attempts, backoff_s=self.backoff_s, classify=_retryable, sleep=self.sleep,
                            deadline=request.deadline, what=f"openai-compatible {self.model}")
        return from_openai(data)


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
                     usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)))
