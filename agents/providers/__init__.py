"""Answer providers behind one Protocol (messages and tool declarations in, text or tool calls out),
the registry that builds them, and what each configured one can do.

`get_provider(name)` builds one from settings: "gemini" (google-genai function calling),
"openai" (an OpenAI-compatible chat endpoint: Ollama, vLLM, llama.cpp) or "offline" (local,
deterministic, extractive; the default without a key).

Capabilities: what a configured provider actually honours, checked rather than assumed. A probe
(`probe`) makes four small calls (each bounded: 64 output tokens, PROBE_TIMEOUT_S):

    system  does it obey a system instruction?          (reply with a code word the user never asked for)
    tools   does it call a declared tool when asked to? (a get_time tool)
    json    does it reply with the JSON object asked for?
    speed   how many prompt tokens does it read per second? (a ~1,000-token prompt, 1 output token)

The speed lets a run size what it sends to what the server can read before the run's deadline
(agents.steps.RunState.prompt_chars_left): a call abandoned while the server is still reading
its prompt leaves the server busy, because a server writes nothing then and cannot notice the
closed connection.

Results are cached (Django's cache) per provider endpoint and model and kept until a newer probe
replaces them (a day at most). After CAPABILITIES_TTL_S they are stale: `/healthz` probes again in the
background (`provider_report`; a health check polling it is the schedule), but runs keep reading the
last result meanwhile, so a provider found to ignore tools is not forgotten when its result ages.
Runs read only what is cached (`known_capabilities`) and never probe inline: a run with a provider
found to ignore tools skips the agentic strategy (agents.loop.run_strategy). The offline provider
is local and declared capable: it is never probed.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

from django.core.cache import cache

from agents.messages import ModelRequest, ModelTurn, ToolSpec, UserMessage
from agents.prompts import CHARS_PER_TOKEN
from agents.providers.offline import OfflineProvider
from agents.providers.openai_compat import OpenAICompatProvider
from tenants.conf import product_settings


@runtime_checkable
class Provider(Protocol):
    name: str
    model: str

    def generate(self, request: ModelRequest) -> ModelTurn:
        """One model turn. Raises agents.messages.ProviderError when it cannot produce one."""
        ...


PROVIDERS = ("gemini", "openai", "offline")


def get_provider(name: str | None = None) -> Provider:
    name = (name or product_settings.DEFAULT_ANSWER_PROVIDER or "offline").lower()
    if name == "offline":
        return OfflineProvider()
    if name == "gemini":
        from agents.providers.gemini import GeminiProvider  # the Gemini SDK (~0.5 s to import): only when used

        return GeminiProvider.from_settings()
    if name in {"openai", "openai_compat"}:
        return OpenAICompatProvider.from_settings()
    raise ValueError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDERS)}")


# Capabilities (see the module docstring).

CAPABILITIES_TTL_S = 600.0  # after this, a result is stale: reported, used, and probed again
KEEP_S = 86_400.0  # how long a result is kept at all
PROBE_TIMEOUT_S = 60.0  # a small self-hosted model on a busy machine needs a while even for 64 tokens
CODE_WORD = "PINEAPPLE-7"
_TIME_TOOL = ToolSpec("get_time", "Returns the current local time in a city.",
                      {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
_JSON_OBJECT = re.compile(r"\{.*\}", re.S)
_probing: set[str] = set()
_probing_lock = threading.Lock()


@dataclass(frozen=True)
class Capabilities:
    provider: str
    model: str
    system: bool | None  # None: not known (the probe call failed; see error)
    tools: bool | None
    json: bool | None
    checked_at: float = 0.0  # time.time() of the probe; 0 = declared, not probed
    error: str = ""
    prompt_tokens_per_s: float | None = None  # measured prompt reading speed; None = not measured (or local)

    def as_dict(self) -> dict:
        return asdict(self)


def provider_key(provider: Provider) -> str:
    return f"grounded:capabilities:{provider.name}:{provider.model}:{getattr(provider, 'endpoint', '')}"


def known_capabilities(provider: Provider) -> Capabilities | None:
    """The cached probe result for this provider (None if never probed or expired); the offline provider's declared ones."""
    if provider.name == "offline":
        return Capabilities(provider.name, provider.model, True, True, True)
    data = cache.get(provider_key(provider))
    return Capabilities(**data) if data else None


def probe(provider: Provider, *, timeout_s: float = PROBE_TIMEOUT_S) -> Capabilities:
    """Probe `provider` now (three small calls) and cache the result. Never raises."""
    if provider.name == "offline":
        return known_capabilities(provider)  # type: ignore[return-value]
    errors: list[str] = []

    def ask(system: str, text: str, tools: tuple[ToolSpec, ...] = ()):
        try:
            return provider.generate(ModelRequest(task="answer", system=system, messages=(UserMessage(text),), tools=tools,
                                                  deadline=time.monotonic() + timeout_s, max_output_tokens=64))
        except Exception as exc:  # a probe reports, it does not fail
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            return None

    turn = ask(f"Whatever the user writes, reply with exactly this word and nothing else: {CODE_WORD}",
               "Hello! What is your favourite fruit?")
    system = None if turn is None else CODE_WORD.lower() in turn.text.lower()
    turn = ask("You can call tools. Use them whenever they can answer.", "What time is it in Paris right now? Use the get_time tool.",
               (_TIME_TOOL,))
    tools = None if turn is None else any(c.name == _TIME_TOOL.name for c in turn.tool_calls)
    turn = ask("Reply with JSON only.", 'Reply with exactly this JSON object and nothing else: {"ok": true, "n": 3}')
    as_json = None if turn is None else _json_object(turn.text) == {"ok": True, "n": 3}
    found = Capabilities(provider.name, provider.model, system, tools, as_json, checked_at=time.time(), error="; ".join(errors),
                         prompt_tokens_per_s=_prompt_speed(provider, timeout_s, errors))
    cache.set(provider_key(provider), found.as_dict(), KEEP_S)
    return found


SPEED_PROMPT = " ".join(["The committee reviewed the quarterly report and approved the travel policy."] * 75)


def _prompt_speed(provider, timeout_s: float, errors: list[str]) -> float | None:
    """Prompt tokens the server reads per second, from one call with a ~1,000-token prompt and one output
    token (time to the whole reply, so an upper bound on the reading time: the speed errs slow)."""
    started = time.monotonic()
    try:
        turn = provider.generate(ModelRequest(task="answer", system="Reply with one word.", messages=(UserMessage(SPEED_PROMPT),),
                                              deadline=started + timeout_s, max_output_tokens=1))
    except Exception as exc:
        errors.append(f"speed: {type(exc).__name__}: {str(exc)[:200]}")
        return None
    elapsed = max(time.monotonic() - started, 1e-3)
    tokens = turn.usage.input_tokens or len(SPEED_PROMPT) / CHARS_PER_TOKEN
    return round(tokens / elapsed, 1)


def _json_object(text: str) -> dict | None:
    m = _JSON_OBJECT.search(text or "")
    try:
        return json.loads(m.group(0)) if m else None
    except json.JSONDecodeError:
        return None


def configured_providers() -> list[str]:
    """The providers the settings configure: offline always, gemini with a key, openai with a base URL."""
    names = ["offline"]
    if product_settings.GEMINI_API_KEY:
        names.append("gemini")
    if product_settings.OPENAI_COMPAT_BASE_URL:
        names.append("openai")
    return names


def provider_report() -> dict:
    """For /healthz: each configured provider's cached capabilities, or {"status": "probing"} while a
    background probe (started here when none is cached) runs. Never blocks on a model call."""
    report: dict = {"default": (product_settings.DEFAULT_ANSWER_PROVIDER or "offline").lower()}
    for name in configured_providers():
        try:
            provider = get_provider(name)
        except Exception as exc:
            report[name] = {"status": "misconfigured", "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            continue
        found = known_capabilities(provider)
        if found is not None:
            report[name] = {"status": "probed" if found.checked_at else "declared", **found.as_dict()}
            if found.checked_at and time.time() - found.checked_at > CAPABILITIES_TTL_S:
                probe_in_background(provider)  # stale: refreshed, the last result used meanwhile
        else:
            report[name] = {"status": "probing", "provider": provider.name, "model": provider.model}
            probe_in_background(provider)
    return report


def probe_in_background(provider: Provider) -> None:
    key = provider_key(provider)
    with _probing_lock:
        if key in _probing:
            return
        _probing.add(key)

    def work() -> None:
        try:
            probe(provider)
        finally:
            with _probing_lock:
                _probing.discard(key)

    threading.Thread(target=work, name="grounded-probe", daemon=True).start()
