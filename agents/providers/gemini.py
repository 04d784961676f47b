"""Gemini through google-genai function calling.

Automatic function calling is off: the loop runs the tools itself (with the run's scope) and
traces them. Parallel function calls in one turn become several ToolCalls; their responses go
back together in one turn. With tools disabled the request keeps the declarations but sets
function calling mode NONE, so the model must answer in text. Retries (429, 5xx, transport
errors, unreadable replies) are ours, with exponential backoff; the SDK's own are off.

Every call is bounded like the OpenAI-compatible one: `max_output_tokens` from the request, a
per-request timeout that never passes the request's deadline, and a streamed reply
(`streamGenerateContent`) that is closed, connection and all, when the deadline comes first.
The finish reason MAX_TOKENS becomes finish_reason "length" on the turn. A stream that ends without
any finish reason (the connection closed mid-reply) is cut: retried like any unreadable reply.

Every call streams, so a request with `on_text` (the answer's text, agents.streaming) gets each
chunk's answer text as it arrives: the chat shows a Gemini answer as it is generated, whatever the
turn. A turn that calls tools may stream text first; the caller drops it (TextStream.clear). A
retried call sends its text again from the start, which the caller's TextStream.finish sets right
with a reset. Thoughts are never sent. The turn itself is assembled from all the chunks
(`from_chunks`), so text, function calls, usage and finish reason are what they would be unstreamed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
from google import genai
from google.genai import errors, types

from agents.messages import (
    AssistantMessage,
    FinishReason,
    Message,
    ModelRequest,
    ModelTurn,
    ProviderError,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from agents.providers.retry import check_reply_deadline, time_left, with_retries
from tenants.conf import product_settings

try:  # google-genai >= 3 sends through httpx2, a fork whose exceptions are not httpx's
    import httpx2

    _TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.TransportError, httpx2.TransportError)
except ImportError:
    _TRANSPORT_ERRORS = (httpx.TransportError,)


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, errors.APIError):
        return exc.code == 429 or (exc.code or 0) >= 500
    return isinstance(exc, _TRANSPORT_ERRORS + (ValueError, errors.UnknownApiResponseError))


class GeminiProvider:
    name = "gemini"

    def __init__(self, *, api_key: str, model: str, base_url: str = "", api_version: str = "", timeout_s: float = 60.0,
                 max_attempts: int = 4, backoff_s: float = 1.0, temperature: float = 0.2,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not api_key:
            raise ProviderError("GEMINI_API_KEY is not set")
        self.model, self.timeout_s = model, timeout_s
        self.endpoint = base_url or "google"
        self.max_attempts, self.backoff_s, self.sleep, self.temperature = max_attempts, backoff_s, sleep, temperature
        options = types.HttpOptions(base_url=base_url or None, api_version=api_version or None, timeout=int(timeout_s * 1000))
        self.client = genai.Client(api_key=api_key, http_options=options)

    @classmethod
    def from_settings(cls, **overrides: Any) -> GeminiProvider:
        return cls(**{"api_key": product_settings.GEMINI_API_KEY, "model": product_settings.GEMINI_MODEL,
                      "base_url": product_settings.GEMINI_BASE_URL, **overrides})

    def generate(self, request: ModelRequest) -> ModelTurn:
        """One turn. Raises ProviderError after retries, DeadlineExceeded when the deadline cuts the call."""
        config = types.GenerateContentConfig(
            system_instruction=request.system,
            temperature=self.temperature,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            max_output_tokens=request.max_output_tokens or None,
        )
        if request.tools:
            config.tools = [types.Tool(function_declarations=[
                types.FunctionDeclaration(name=t.name, description=t.description, parameters_json_schema=t.parameters)
                for t in request.tools])]
            mode = types.FunctionCallingConfigMode.AUTO if request.tools_enabled else types.FunctionCallingConfigMode.NONE
            config.tool_config = types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode=mode))
        contents = to_contents(request.messages)

        def call() -> list[types.GenerateContentResponse]:
            left = time_left(self.timeout_s, request.deadline)
            config.http_options = types.HttpOptions(timeout=max(1, int(left * 1000)))
            chunks: list[types.GenerateContentResponse] = []
            stream = self.client.models.generate_content_stream(model=self.model, contents=contents, config=config)
            try:
                for chunk in stream:
                    check_reply_deadline(request.deadline)
                    chunks.append(chunk)
                    if request.on_text is not None:
                        for piece in answer_text(chunk):
                            request.on_text(piece)
            finally:
                # google-genai declares an Iterator; it returns a generator, whose close() ends the HTTP response too.
                stream.close()  # type: ignore[attr-defined]
            if not any(c.candidates for c in chunks) and not any(c.prompt_feedback and c.prompt_feedback.block_reason for c in chunks):
                raise errors.UnknownApiResponseError("response has no candidates")
            if any(c.candidates for c in chunks) and not any(c.candidates and c.candidates[0].finish_reason for c in chunks):
                raise errors.UnknownApiResponseError("the stream ended before the reply was finished (no finish reason)")
            return chunks

        chunks = with_retries(call, attempts=self.max_attempts, backoff_s=self.backoff_s, classify=_retryable,
                              sleep=self.sleep, deadline=request.deadline, what=f"gemini {self.model}")
        return from_chunks(chunks)


def answer_text(chunk: types.GenerateContentResponse) -> list[str]:
    """The pieces of answer text in one streamed chunk (thoughts and function calls are not answer text)."""
    candidate = chunk.candidates[0] if chunk.candidates else None
    parts = (candidate.content.parts or []) if candidate is not None and candidate.content is not None else []
    return [part.text for part in parts if part.text and not part.thought and part.function_call is None]


def to_contents(messages: tuple[Message, ...] | list[Message]) -> list[types.Content]:
    """Our messages as Gemini contents; consecutive tool results share one user turn."""
    contents: list[types.Content] = []
    for m in messages:
        if isinstance(m, UserMessage):
            last = contents[-1] if contents else None
            if last is not None and last.role == "user" and last.parts:
                last.parts.append(types.Part(text=m.text))  # e.g. the budget note right after function responses
            else:
                contents.append(types.Content(role="user", parts=[types.Part(text=m.text)]))
        elif isinstance(m, AssistantMessage):
            if isinstance(m.raw, types.Content):
                contents.append(m.raw)  # verbatim, with any thought signatures
                continue
            parts = [types.Part(text=m.text)] if m.text else []
            parts += [types.Part(function_call=types.FunctionCall(id=c.id or None, name=c.name, args=c.arguments)) for c in m.tool_calls]
            contents.append(types.Content(role="model", parts=parts or [types.Part(text="")]))
        elif isinstance(m, ToolResultMessage):
            part = types.Part(function_response=types.FunctionResponse(
                id=m.call_id if not m.call_id.startswith("gemini-") else None, name=m.name, response=m.content))
            last = contents[-1] if contents else None
            if last is not None and last.role == "user" and last.parts and last.parts[0].function_response is not None:
                last.parts.append(part)
            else:
                contents.append(types.Content(role="user", parts=[part]))
    return contents


def from_chunks(chunks: list[types.GenerateContentResponse]) -> ModelTurn:
    """A streamed reply's chunks as one turn: their parts in order (adjacent plain text joined),
    the last usage and finish reason reported."""
    parts: list[types.Part] = []
    finish, usage = None, None
    for chunk in chunks:
        usage = chunk.usage_metadata or usage
        candidate = chunk.candidates[0] if chunk.candidates else None
        if candidate is None:
            continue
        finish = candidate.finish_reason or finish
        for part in (candidate.content.parts or []) if candidate.content else []:
            plain = part.text is not None and not part.thought and not part.thought_signature and part.function_call is None
            last = parts[-1] if parts else None
            if plain and last is not None and last.text is not None and not last.thought and not last.thought_signature \
                    and last.function_call is None:
                parts[-1] = types.Part(text=(last.text or "") + (part.text or ""))
            else:
                parts.append(part)
    content = types.Content(role="model", parts=parts) if parts else None
    response = types.GenerateContentResponse(
        candidates=[types.Candidate(content=content, finish_reason=finish)] if chunks and any(c.candidates for c in chunks) else [],
        usage_metadata=usage)
    return from_response(response)


def from_response(response: types.GenerateContentResponse) -> ModelTurn:
    usage = response.usage_metadata
    tokens = Usage(input_tokens=(usage.prompt_token_count or 0) if usage else 0,
                   output_tokens=((usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)) if usage else 0)
    candidate = response.candidates[0] if response.candidates else None
    content = candidate.content if candidate else None
    texts, calls = [], []
    for i, part in enumerate((content.parts or []) if content else []):
        if part.function_call is not None:
            fc = part.function_call
            args, problem = fc.args, None
            if args is not None and not isinstance(args, dict):
                args, problem = {}, f"arguments must be an object, got {json.dumps(args, default=str)[:200]}"
            calls.append(ToolCall(id=fc.id or f"gemini-{i}", name=fc.name or "", arguments=dict(args or {}), arguments_error=problem))
        elif part.text and not part.thought:
            texts.append(part.text)
    finish = candidate.finish_reason if candidate else None
    reason: FinishReason = "" if finish is None else "length" if finish == types.FinishReason.MAX_TOKENS else \
        "stop" if finish == types.FinishReason.STOP else "other"
    if reason == "stop" and calls:
        reason = "tool_calls"
    return ModelTurn(text="".join(texts).strip(), tool_calls=tuple(calls), usage=tokens, raw=content, finish_reason=reason)
