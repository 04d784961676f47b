"""A Gemini answer handed out as it is generated: the real google-genai SDK streams
`streamGenerateContent` from tests.fakes.fake_gemini (text in 16-character chunks, usage and finish
reason on the last), and each chunk's text reaches `request.on_text` (agents.streaming) as it arrives.
The turn assembled from the chunks is the one an unchunked reply gives; a stream broken midway is
retried like any failed call."""

from __future__ import annotations

import time

import pytest

from agents.budgets import Budgets
from agents.messages import ModelRequest, ProviderError, UserMessage
from agents.providers.gemini import GeminiProvider
from agents.services import ask
from agents.streaming import TextStream
from tests.factories import whole_tenant
from tests.fakes.fake_gemini import FakeGemini, drops_mid_stream, fails_mid_stream, paced, text

ANSWER = "Hotel stays are reimbursed up to EUR 180 per night in Paris with receipts"  # one sentence: one piece unstreamed


def provider(fake: FakeGemini) -> GeminiProvider:
    return GeminiProvider(api_key="test-key", model="gemini-test", base_url=fake.base_url, backoff_s=0)


def request(on_text=None) -> ModelRequest:
    return ModelRequest(task="answer", system="Answer.", messages=(UserMessage("q"),), on_text=on_text)


def said_then_called(words: str, search_args: dict, *, output_tokens: int = 10) -> dict:
    """A fake turn that says `words`, then calls search (text and a function call in one reply)."""
    return {"parts": [{"text": words}, {"functionCall": {"name": "search", "args": search_args}}], "usage": (100, output_tokens)}


def shown(events: list[tuple[str, bool]]) -> str:
    """The text as a reader of the events shows it: pieces appended, a reset starting afresh."""
    out = ""
    for delta, reset in events:
        out = delta if reset else out + delta
    return out


def test_each_chunk_is_handed_on_as_it_arrives_and_the_turn_is_the_unstreamed_one():
    got: list[tuple[str, float]] = []
    with FakeGemini([paced(0.1, text(ANSWER, prompt_tokens=120, output_tokens=17))]) as fake:
        turn = provider(fake).generate(request(lambda piece: got.append((piece, time.monotonic()))))
    returned = time.monotonic()
    assert [p for p, _ in got] == [ANSWER[i:i + 16] for i in range(0, len(ANSWER), 16)]  # 5 chunks, 5 pieces
    assert returned - got[0][1] >= 0.35  # the first piece came while the rest was still being generated
    with FakeGemini([text(ANSWER, prompt_tokens=120, output_tokens=17)], chunk_chars=0) as fake:  # the same reply, one chunk
        whole = provider(fake).generate(request())
    assert turn == whole  # text, usage (the last chunk's), finish reason and content
    assert (turn.text, turn.usage.input_tokens, turn.usage.output_tokens, turn.finish_reason) == (ANSWER, 120, 17, "stop")


def test_a_streamed_turn_with_a_function_call_still_calls_it():
    got: list[str] = []
    with FakeGemini([said_then_called("Let me look that up in the policy. ", {"query": "hotel"}, output_tokens=12)]) as fake:
        turn = provider(fake).generate(request(got.append))
    assert "".join(got) == "Let me look that up in the policy. " and len(got) >= 2  # streamed; the caller drops it (TextStream.clear)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("search", {"query": "hotel"})]
    assert turn.finish_reason == "tool_calls" and turn.usage.output_tokens == 12


@pytest.mark.parametrize("broken", [fails_mid_stream(text(ANSWER), after=2), drops_mid_stream(text(ANSWER), after=2)],
                         ids=["error-event", "connection-closed"])
def test_a_stream_broken_midway_is_retried_and_the_reader_starts_again(broken):
    events: list[tuple[str, bool]] = []
    stream = TextStream(lambda delta, reset: events.append((delta, reset)))
    with FakeGemini([broken, text(ANSWER)]) as fake:
        turn = provider(fake).generate(request(stream.send))
        stream.finish(turn.text)
    assert len(fake.requests) == 2 and turn.text == ANSWER
    assert events[0] == (ANSWER[:16], True)  # the first attempt's text was shown ...
    assert shown(events) == ANSWER and [r for _, r in events].count(True) == 2  # ... and replaced from a reset


def test_a_permanent_error_midway_fails_as_before():
    got: list[str] = []
    with FakeGemini([fails_mid_stream(text(ANSWER), after=1, code=400)]) as fake, pytest.raises(ProviderError):
        provider(fake).generate(request(got.append))
    assert len(fake.requests) == 1 and got == [ANSWER[:16]]


@pytest.mark.django_db(databases=["default", "owner"])
def test_a_run_streams_the_answer_in_chunks_and_drops_the_text_of_a_turn_that_called_tools(acme):
    tenant, _, chunks = acme
    hotel = chunks["travel2"]
    events: list[tuple[str, bool]] = []
    preamble = said_then_called("Searching the policy first. ", {"query": "hotel night"})
    answer = f"Per the travel policy hotel nights are reimbursed as stated [c:{hotel.id}]"
    with FakeGemini([preamble], when_exhausted=text(answer, output_tokens=25)) as fake:
        run = ask(scope=whole_tenant(tenant), question="How much is a hotel night?", strategy="agentic", provider=provider(fake),
                  on_text=lambda delta, reset: events.append((delta, reset)))
    assert run.answer.startswith("Per the travel policy"), run.answer
    resets = [i for i, (_, reset) in enumerate(events) if reset]
    assert len(resets) == 3 and events[resets[0]] == ("Searching the policy first. "[:16], True)
    assert events[resets[1]] == ("", True)  # the tool-calling turn's text dropped
    assert shown(events) == answer and len(events[resets[2]:]) >= 2  # one sentence, yet several events: streamed, not split
    assert run.input_tokens >= 200 and run.output_tokens >= 35


@pytest.mark.django_db(databases=["default", "owner"])
def test_strict_citations_stream_no_text_from_gemini(acme):
    tenant, _, chunks = acme
    events: list[tuple[str, bool]] = []
    with FakeGemini([], when_exhausted=text(f"Hotels are capped [c:{chunks['travel2'].id}]")) as fake:
        ask(scope=whole_tenant(tenant), question="Hotel night?", strategy="agentic", provider=provider(fake),
            budgets=Budgets(strict_citations=True), on_text=lambda delta, reset: events.append((delta, reset)))
    assert events == [] and fake.requests
