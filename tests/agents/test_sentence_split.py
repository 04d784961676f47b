"""Quotes that are exact: the one sentence splitter (kb.sentence_split), the sentences built on it
(agents.lexical.sentences, kb.sentences.sentence_spans) and the verifier's token-boundary check."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.citations import RetrievedChunk, check_citations, quote_in
from agents.lexical import normalise, sentences
from agents.providers.offline import compose_answer
from agents.sufficiency import SeenChunk
from kb.sentence_split import split
from kb.sentences import sentence_spans

DEMO = Path(__file__).resolve().parents[2] / "kb" / "demo"


def pieces(text: str) -> list[str]:
    return [text[s:e] for s, e, _ in split(text)]


@pytest.mark.parametrize("text, expected", [
    ("Lunch costs EUR 4.50 per day. Dinner is extra.", ["Lunch costs EUR 4.50 per day.", "Dinner is extra."]),
    ("The total is 1,000.5 units. Version v2.3.1 replaced 3.10 today.",
     ["The total is 1,000.5 units.", "Version v2.3.1 replaced 3.10 today."]),
    ("Meet at 10.30 on 3.4.2024 in room 4B. Bring 12.5% more.", ["Meet at 10.30 on 3.4.2024 in room 4B.", "Bring 12.5% more."]),
    ("It rose in 2024. The 2. Stock and room 4. Open it.", ["It rose in 2024.", "The 2. Stock and room 4. Open it."]),
    ("Bring a device, e.g. Laptops or tablets, i.e. Portable ones. Pens, paper, etc. are provided.",
     ["Bring a device, e.g. Laptops or tablets, i.e. Portable ones.", "Pens, paper, etc. are provided."]),
    ("Dr. Smith met Mr. Jones about form No. 5 of approx. 30 forms. The U.S. Army came, vs. Navy ships.",
     ["Dr. Smith met Mr. Jones about form No. 5 of approx. 30 forms.", "The U.S. Army came, vs. Navy ships."]),
    ("J. R. R. Tolkien wrote it. John F. Kennedy read it.", ["J. R. R. Tolkien wrote it.", "John F. Kennedy read it."]),
    ("See https://x.example.com/a.b?c=1 for details. Write to ops@corp.example. Then wait.",
     ["See https://x.example.com/a.b?c=1 for details.", "Write to ops@corp.example.", "Then wait."]),
    ("He waited... and waited. It ended… Then came night.", ["He waited... and waited.", "It ended…", "Then came night."]),
    ('He said "Stop. Now." and left. "Go. Run." She ran.', ['He said "Stop. Now." and left.', '"Go. Run."', "She ran."]),
    ("Elle a dit « Non. Jamais. » puis est partie. Ça suffit.", ["Elle a dit « Non. Jamais. » puis est partie.", "Ça suffit."]),
    ("Er kam am 3. Mai. Ökonomie ist wichtig. Ärzte kommen. Élan vital. Ωμέγα τέλος. Дом стоит.",
     ["Er kam am 3. Mai.", "Ökonomie ist wichtig.", "Ärzte kommen.", "Élan vital.", "Ωμέγα τέλος.", "Дом стоит."]),
    ("¿Qué pasa? ¡Nada! Bien.", ["¿Qué pasa?", "¡Nada!", "Bien."]),
    ("東京は大きい。次の文です。", ["東京は大きい。", "次の文です。"]),
    ("Is it allowed? No. Employees must ask first.", ["Is it allowed?", "No.", "Employees must ask first."]),
])
def test_named_cases(text, expected):
    assert pieces(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("aZé4. ,!?…\n\"“”«»-#:@/。") + ["e.g.", "Dr.", "4.50", "J. "]), max_size=80).map("".join))
def test_spans_of_any_text_are_ordered_stripped_slices(text):
    spans = split(text)
    assert all(s < e and not text[s].isspace() and not text[e - 1].isspace() for s, e, _ in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert all(not text[e:b].strip() or text[e:b].strip() in "-*+•" or text[e:b].strip()[:-1].isdigit()
               for (_, e, _), (b, _, _) in zip(spans, spans[1:], strict=False))  # only whitespace or a bullet between


def test_blocks_list_items_and_headings():
    text = "# Title\nOwner: HR.\n\nFirst line wraps\nhere. Next one.\n- Item one is here.\n2) Item two.\n## Sub\nBody."
    spans = split(text)
    assert [(text[s:e], h) for s, e, h in spans] == [
        ("# Title", True), ("Owner: HR.", False), ("First line wraps\nhere.", False), ("Next one.", False),
        ("Item one is here.", False), ("Item two.", False), ("## Sub", True), ("Body.", False)]


def test_lexical_sentences_keep_figures_and_drop_headings():
    text = "## Meals\nLunch costs EUR 4.50 per day. After the update: EUR 5.00 per\nday from 1.1.2027."
    assert sentences(text) == ["Lunch costs EUR 4.50 per day.", "After the update: EUR 5.00 per day from 1.1.2027."]


def test_sentence_spans_keep_figures():
    text = "Lunch costs EUR 4.50 per day.\nVersion 2.3.1 ships on 3.4.2024 with fixes."
    assert [text[s:e] for s, e in sentence_spans(text)] == ["Lunch costs EUR 4.50 per day.",
                                                            "Version 2.3.1 ships on 3.4.2024 with fixes."]


# --- Generated sentences with figures ---------------------------------------------------------------

_LOWER = "abcdefghijklmnopqrstuvwxyzàéèöüßçñø"
_CAPITALS = "ABCDEFGHIJKLMNOPQRSTUVWXYZÀÁÂÄÅÆÇÈÉÊÍÎÑÓÖØÚÜÝΑΒΓΔΩБДЖЯ"
lower_word = st.text(_LOWER, min_size=1, max_size=9)
long_word = st.text(_LOWER, min_size=5, max_size=10)
capital_word = st.builds(lambda c, rest: c + rest, st.sampled_from(_CAPITALS), st.text(_LOWER, min_size=2, max_size=8))
n = st.integers(0, 9999)
small = st.integers(0, 99)
figure = st.one_of(
    st.builds(lambda a, b: f"{a}.{b:02d}", n, small),  # decimal
    st.builds(lambda a, b, c: f"{a},{b:03d}.{c}", st.integers(1, 999), st.integers(0, 999), st.integers(0, 9)),  # thousands
    st.builds(lambda a, b, c: f"v{a}.{b}.{c}", small, small, small),  # version
    st.builds(lambda a, b: f"{a}.{b}", st.integers(1, 9), st.integers(10, 12)),  # version 3.10
    st.builds(lambda cur, a, b: f"{cur} {a}.{b:02d}", st.sampled_from(["EUR", "USD", "CHF"]), n, small),  # amount
    st.builds(lambda a, b: f"€{a},{b:02d}", n, small),
    st.builds(lambda a, b: f"{a}.{b}%", small, st.integers(0, 9)),  # percentage
    st.builds(lambda h, m: f"{h}.{m:02d}", st.integers(0, 23), st.integers(0, 59)),  # time 10.30
    st.builds(lambda d, m, y: f"{d}.{m}.{y}", st.integers(1, 31), st.integers(1, 12), st.integers(1900, 2100)),  # date
)
phrase = st.one_of(
    st.sampled_from(["e.g. Paris", "i.e. the rest", "etc. and more", "Dr. Smith", "Mr. Jones", "No. 5", "approx. 30",
                     "U.S. Army", "vs. Linux", "J. R. R. Tolkien", "John F. Kennedy", "wait... then",
                     'said "Stop. Now." and', "« Non. Jamais. » puis", "https://x.example.com/a.b?c=1",
                     "ops@corp.example", "3. Mai"]),
    st.builds(lambda c, name: f"{c}. {name}", st.sampled_from(_CAPITALS), capital_word),  # an initial
)
token = st.one_of(lower_word, capital_word, figure, phrase)


@st.composite
def sentence(draw) -> str:
    first = draw(st.one_of(capital_word, figure.filter(lambda f: f[0].isdigit())))
    middle = draw(st.lists(token, min_size=1, max_size=8))
    return " ".join([first, *middle, draw(long_word)]) + draw(st.sampled_from([".", "!", "?", "...", ".\u201d"]))


def _balanced(s: str) -> str:  # a sentence ending in a closing quote opens it first
    return "\u201c" + s if s.endswith("\u201d") else s


generated = st.lists(sentence().map(_balanced), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(generated, st.lists(st.sampled_from([" ", "  ", "\n", " \n"]), min_size=6, max_size=6))
def test_generated_sentences_come_back_exactly(sents, seps):
    text = sents[0] + "".join(sep + s for sep, s in zip(seps, sents[1:], strict=False))
    spans = split(text)
    assert [text[s:e] for s, e, _ in spans] == sents
    assert all(text[s:e].strip() == text[s:e] and e > s for s, e, _ in spans)
    assert sentences(text) == [" ".join(s.split()) for s in sents]


@settings(max_examples=100, deadline=None)
@given(generated, st.lists(st.booleans(), min_size=40, max_size=40))
def test_hard_wrapped_sentences_are_quoted_whole_and_verified(sents, wraps):
    words = " ".join(sents).split(" ")
    text = words[0] + "".join(("\n" if wrap else " ") + w for wrap, w in zip(wraps + [False] * len(words), words[1:], strict=False))
    # A wrapped line that starts like a list item or a heading is one: not generated here.
    if any(line.lstrip()[:1] in "-*+•#" or line.split(" ")[0].rstrip(".)").isdigit() and line.split(" ")[0][-1:] in ".)"
           for line in text.split("\n")[1:]):
        return
    quoted = sentences(text)
    assert quoted == [" ".join(s.split()) for s in sents]
    chunk = {1: RetrievedChunk(1, 1, "h", text)}
    for s in quoted:
        assert quote_in(normalise(s), normalise(text)) == "whole"
        assert check_citations(f'"{s.replace(chr(34), chr(39))}" [c:1]', chunk)[0].verified


@settings(max_examples=200, deadline=None)
@given(capital_word, st.lists(lower_word, max_size=3), n, st.integers(1, 99), long_word)
def test_a_quote_ending_inside_a_figure_is_rejected(head, words, whole, cents, tail):
    text = " ".join([head, *words, f"EUR {whole}.{cents:02d}", tail]) + "."
    cut_at = text.index(f"EUR {whole}.") + len(f"EUR {whole}")
    chunk = {1: RetrievedChunk(1, 1, "h", text)}
    for quote in (text[:cut_at], text[:cut_at + 1], text[cut_at + 1:]):  # "... EUR 4", "... EUR 4.", "50 tail."
        check = check_citations(f'"{quote}" [c:1]', chunk)[0]
        assert check.verdict == "quote_mismatch" and "part of a longer word or figure" in check.reason
    assert check_citations(f'"{text}" [c:1]', chunk)[0].verified


def test_verifier_rejects_a_quote_cut_inside_a_token_and_accepts_whole_ones():
    chunk = {7: RetrievedChunk(7, 1, "h", "Lunch costs EUR 4.50 per day. Write to ops@corp.example for receipts.")}
    verdicts = [check_citations(f'"{q}" [c:7]', chunk)[0] for q in (
        "Lunch costs EUR 4.", "Lunch costs EUR 4", "50 per day.", "unch costs", "Write to ops@corp.", "Write to ops",
        "Lunch costs EUR 4.50 per day.", "Lunch costs EUR 4.50 per day", "Write to ops@corp.example for receipts.",
        "costs EUR 4.50")]
    assert [v.verdict for v in verdicts] == ["quote_mismatch"] * 6 + ["verified"] * 4
    assert "EUR 4.50" in verdicts[0].reason or "longer word or figure" in verdicts[0].reason
    assert check_citations('"Lunch costs EUR 5." [c:7]', chunk)[0].reason == "quoted text does not occur in the cited chunk"


def test_verifier_boundaries_in_scripts_without_spaces_and_around_punctuation():
    chunk = {1: RetrievedChunk(1, 1, "h", "東京は大きい。次の文です。The (new) rule [1] applies: from 2020–2024 only.")}
    for quote, verified in (("東京は大きい。", True), ("次の文です。", True), ("The (new) rule", True), ("rule [1] applies", True),
                            ("from 2020", False), ("2024 only.", False), ("from 2020–2024 only", True)):
        assert check_citations(f'"{quote}" [c:1]', chunk)[0].verified is verified, quote


def test_verifier_accepts_a_quote_a_later_occurrence_has_whole():
    chunk = {1: RetrievedChunk(1, 1, "h", "Fees rose to 4.50 in May. Fees rose to 4. Fees fell.")}
    assert check_citations('"Fees rose to 4." [c:1]', chunk)[0].verified


def test_offline_answer_quotes_the_figure_whole_and_verifies():
    chunk = SeenChunk(1, "## Meals\n\nLunch costs EUR 4.50 per day. Dinner is not covered.", 1.0, False, title="Meals")
    answer = compose_answer("How much does lunch cost per day?", [chunk])
    assert '"Lunch costs EUR 4.50 per day." [c:1]' in answer
    assert "EUR 4.\"" not in answer
    checks = check_citations(answer, {1: RetrievedChunk(1, 1, "h", chunk.text)})
    assert checks and all(c.verified for c in checks)


def test_every_demo_sentence_is_quoted_whole_and_verified():
    for path in sorted(DEMO.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        chunk = {1: RetrievedChunk(1, 1, "h", text)}
        for s, e, _ in split(text):
            assert text[s:e] == text[s:e].strip()
        for s in sentences(text):
            assert check_citations(f'"{s.replace(chr(34), chr(39))}" [c:1]', chunk)[0].verified, (path.name, s)
    travel = (DEMO / "travel-and-expense-policy.md").read_text(encoding="utf-8")
    assert "Using your own car for business is reimbursed at EUR 0.30 per kilometre." in sentences(travel)
