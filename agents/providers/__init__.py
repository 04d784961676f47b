"""Answer providers behind one Protocol: messages and tool declarations in, text or tool calls out.

`get_provider(name)` builds one from settings: "gemini" (google-genai function calling),
"openai" (an OpenAI-compatible chat endpoint: Ollama, vLLM, llama.cpp) or "offline" (local,
deterministic, extractive; the default without a key).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from django.conf import settings

from agents.messages import ModelRequest, ModelTurn
from agents.providers.offline import OfflineProvider
from agents.providers.openai_compat import OpenAICompatProvider


@runtime_checkable
class Provider(Protocol):
    name: str
    model: str

    def generate(self, request: ModelRequest) -> ModelTurn:
        """One model turn. Raises agents.messages.ProviderError when it cannot produce one."""
        ...


PROVIDERS = ("gemini", "openai", "offline")


def get_provider(name: str | None = None) -> Provider:
    name = (name or settings.DEFAULT_ANSWER_PROVIDER or "offline").lower()
    if name == "offline":
        return OfflineProvider()
    if name == "gemini":
        from agents.providers.gemini import GeminiProvider  # the Gemini SDK (~0.5 s to import): only when used

        return GeminiProvider.from_settings()
    if name in {"openai", "openai_compat"}:
        return OpenAICompatProvider.from_settings()
    raise ValueError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDERS)}")
