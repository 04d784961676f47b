"""The provider-neutral conversation: messages, tool calls, tool declarations and model turns.

Pure data, no ORM and no SDK types, so the loop, the providers and the tests share one vocabulary.
Tool results are JSON-able dicts: the Gemini provider sends them as function responses, the
OpenAI-compatible one as JSON strings, the offline provider reads them directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Task = Literal["agent", "repair", "rewrite", "judge", "answer", "followup"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # Set when the provider received arguments it could not parse (e.g. malformed JSON); the tool
    # is then not run and the model is told what was wrong.
    arguments_error: str | None = None


@dataclass(frozen=True)
class UserMessage:
    text: str


@dataclass(frozen=True)
class AssistantMessage:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    raw: Any = None  # the provider's own turn object, sent back verbatim when it needs to be (Gemini thought signatures)


@dataclass(frozen=True)
class ToolResultMessage:
    call_id: str
    name: str
    content: dict[str, Any]


Message = UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of an object


@dataclass(frozen=True)
class ContextChunk:
    """A retrieved chunk placed into a prompt by code (classic/pipeline), kept structured for the offline provider."""

    chunk_id: int
    text: str
    title: str
    locator: str = ""
    score: float = 0.0
    flags: tuple[str, ...] = ()
    metadata: Mapping | None = None  # the document's metadata (source, dates...)


DocumentShare = Callable[[Sequence[str]], Mapping[str, float]]  # names -> the share of the caller's documents naming each


@dataclass(frozen=True)
class ModelRequest:
    task: Task
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tools_enabled: bool = True
    question: str = ""  # the user's original question
    context: tuple[ContextChunk, ...] = ()  # already rendered into `messages`; structured copy for local reasoning
    # The scope's facets (agents.planning.Facets.summary()) when rendered into `messages`; structured copy likewise.
    facets: Mapping | None = None
    # time.monotonic() value by which the call must be over: no retry starts after it, and a network
    # provider abandons (closes) a call still running at it. The run's wall budget.
    deadline: float | None = None
    max_output_tokens: int | None = None  # the reply's token cap (from the run's token budget); None = provider default
    # A conversation's earlier turns, (standalone question, answer) oldest first, when rendered into
    # `messages` (the `followup` task); structured copy likewise.
    history: tuple[tuple[str, str], ...] = ()
    # Called with each piece of the reply's text as it is produced, by a provider that can
    # (agents.streaming.TextStream.send); None when nobody reads the text before the reply is in.
    on_text: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    # names -> the share of the documents the run may read that name each (agents.tools.document_share,
    # counted in the caller's scope); what it was asked is recorded with the call. None: not offered.
    document_share: DocumentShare | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


FinishReason = Literal["stop", "tool_calls", "length", "other", ""]


@dataclass(frozen=True)
class ModelTurn:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    raw: Any = None
    # Why the model stopped, normalised: "length" = cut off at the output cap (OpenAI finish_reason
    # "length", Gemini MAX_TOKENS); "" = the provider did not say.
    finish_reason: FinishReason = ""

    @property
    def truncated(self) -> bool:
        """The reply was cut off: its text (or tool arguments) is not complete."""
        return self.finish_reason == "length"


class ProviderError(RuntimeError):
    """The model could not be reached or answered unusably, after retries."""


class DeadlineExceeded(ProviderError):
    """The call was abandoned (its connection closed) because the run's wall budget ran out."""
