"""What each model call was sent, recorded compactly and rebuilt exactly (the audit of model input).

A model call's step stores `model_input`: the system instruction, the conversation, the declared
tool names, whether tools were enabled and the output cap, i.e. everything of the request a
provider turns into its wire format. Within a run the calls repeat themselves (the agentic loop
resends its whole conversation each turn; every call of a strategy has the same instructions), so
a recorded input refers to an earlier step of the same run where it can:

    {"system": "<text>" | {"same_as_step": 3},
     "prefix": {"step": 3, "messages": 5},       # the first 5 messages are step 3's first 5
     "messages": [<the messages after them>], "tools": [...], "tools_enabled": true, "max_output_tokens": 2048}

`rebuild(steps, ordinal)` expands it back to the full request, which `as_recorded` produces for a
live ModelRequest: the two are equal, key for key, for every model call (tests/agents/test_model_inputs.py).
The stored form is part of the step row, so the run's hash covers it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents.messages import AssistantMessage, Message, ModelRequest, UserMessage


def message_json(m: Message) -> dict:
    if isinstance(m, UserMessage):
        return {"role": "user", "text": m.text}
    if isinstance(m, AssistantMessage):
        return {"role": "assistant", "text": m.text,
                "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments, "arguments_error": c.arguments_error}
                               for c in m.tool_calls]}
    return {"role": "tool", "call_id": m.call_id, "name": m.name, "content": m.content}


def as_recorded(request: ModelRequest) -> dict:
    """The full, uncompacted record of `request`."""
    return {"system": request.system, "messages": [message_json(m) for m in request.messages],
            "tools": [t.name for t in request.tools], "tools_enabled": request.tools_enabled,
            "max_output_tokens": request.max_output_tokens}


def compact(full: dict, earlier: Mapping[int, dict]) -> dict:
    """`full` (as_recorded) with its system text and longest message prefix referring to `earlier`
    ({step ordinal: full record} of this run's earlier model calls)."""
    out = dict(full)
    same_system = next((k for k, e in earlier.items() if e["system"] == full["system"]), None)
    if same_system is not None:
        out["system"] = {"same_as_step": same_system}
    best, best_len = None, 0
    for k, e in earlier.items():
        n = _common_prefix(_canonical(e["messages"]), _canonical(full["messages"]))
        if n > best_len:
            best, best_len = k, n
    if best is not None:
        out["prefix"] = {"step": best, "messages": best_len}
        out["messages"] = full["messages"][best_len:]
    return out


def rebuild(steps: Sequence[Mapping[str, Any]], ordinal: int) -> dict:
    """The full input of the model call at `ordinal`, from stored step rows (dicts with `ordinal` and `model_input`)."""
    by_ordinal = {s["ordinal"]: s for s in steps}
    stored = by_ordinal[ordinal]["model_input"]
    if not stored:
        return {}
    full = dict(stored)
    if isinstance(stored["system"], dict):
        full["system"] = rebuild(steps, stored["system"]["same_as_step"])["system"]
    if "prefix" in stored:
        head = rebuild(steps, stored["prefix"]["step"])["messages"][: stored["prefix"]["messages"]]
        full["messages"] = [*head, *stored["messages"]]
        del full["prefix"]
    return full


def _canonical(messages: list[dict]) -> list[str]:
    return [json.dumps(m, sort_keys=True, default=str) for m in messages]


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
