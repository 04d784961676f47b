"""The answer's text as it is written (agents.streaming): the offline composer hands out each part's
heading and quotes as it picks them; a stream reconciles what was sent with the reply's final text."""

from __future__ import annotations

from agents.messages import ModelRequest, UserMessage
from agents.providers.offline import compose_by_words
from agents.providers.openai_compat import OpenAICompatProvider
from agents.streaming import TextStream, pieces
from agents.sufficiency import SeenChunk
from tests.fakes.fake_openai import FakeOpenAI, reply

CHUNKS = [
    SeenChunk(2, "Hotel stays are reimbursed up to EUR 180 per night in Paris. Receipts are required for every claim.",
              0.8, False, "", "Travel policy"),
    SeenChunk(3, "Annual leave is 28 days a year. Unpaid leave needs the manager's approval.", 0.4, False, "", "Leave policy"),
]


def collect() -> tuple[list[tuple[str, bool]], TextStream]:
    got: list[tuple[str, bool]] = []
    return got, TextStream(lambda delta, reset: got.append((delta, reset)))


def test_the_composer_emits_each_heading_and_quote_as_it_composes_them():
    emitted: list[str] = []
    question = "How much is a hotel night in Paris, and how many days of annual leave do I get?"
    answer = compose_by_words(question, CHUNKS, emit=emitted.append)
    assert "".join(emitted) == answer
    assert len(emitted) >= 4  # two headings, each with its quote
    assert emitted[0] == "1. How much is a hotel night in Paris:"
    assert emitted[2].startswith("\n2. How many days of annual leave")  # the user's words, capitalised as a heading
    assert "Extractive answer" not in answer  # the mode is said once by the page, not in every answer


def test_a_stream_sends_only_the_rest_or_starts_again_from_a_reset():
    got, stream = collect()
    stream.send("1. Part:")
    stream.send("\n   - quote")
    stream.finish("1. Part:\n   - quote\n2. More. And more.")
    assert got == [("1. Part:", True), ("\n   - quote", False), ("\n", False), ("2. More. ", False), ("And more.", False)]

    got, stream = collect()
    stream.send("Draft that the judge replaced")
    stream.finish("NOT_ENOUGH_EVIDENCE: nothing. Really.")
    assert got[1:] == [("NOT_ENOUGH_EVIDENCE: nothing. ", True), ("Really.", False)]

    got, stream = collect()
    stream.send("Let me search")
    stream.clear()
    assert got == [("Let me search", True), ("", True)]


def test_an_openai_compatible_reply_is_handed_on_as_its_tokens_arrive():
    text = "Hotels are reimbursed up to EUR 180 per night in Paris [c:2]. Receipts are required for every claim."
    got: list[str] = []
    with FakeOpenAI([reply(text)]) as fake:  # streams the reply in 16-character chunks, as a server streams tokens
        provider = OpenAICompatProvider(base_url=fake.base_url, model="tiny", backoff_s=0)
        turn = provider.generate(ModelRequest(task="answer", system="Answer.", messages=(UserMessage("q"),), on_text=got.append))
    assert turn.text == text and "".join(got) == text and len(got) >= 6

    sent, stream = collect()  # streamed with whitespace around, the reply stripped once whole: nothing is sent again
    for piece in [" ", *got, "\n"]:
        stream.send(piece)
    stream.finish(turn.text)
    assert "".join(d for d, _ in sent) == f" {text}\n" and [r for _, r in sent].count(True) == 1


def test_pieces_are_sentences_and_lines_that_join_back_to_the_text():
    text = "One sentence. Two? Three!\nA line [c:3]\n\nEUR 1.5 per km."
    assert "".join(pieces(text)) == text
    assert pieces(text) == ["One sentence. ", "Two? ", "Three!\n", "A line [c:3]\n\n", "EUR 1.5 per km."]
