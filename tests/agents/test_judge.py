"""The relevance judge (agents.judge) with the packaged cross-encoder: reranking, per-part
judgements against the calibrated threshold, the answer-kind rule, flagged chunks never quoted,
and the word-overlap rules when the model is `none`."""

from __future__ import annotations

import json

import pytest

from agents import judge
from agents.providers.offline import compose_answer
from agents.sufficiency import SeenChunk


@pytest.fixture
def packaged(monkeypatch):
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", "packaged")


CHUNKS = [
    SeenChunk(1, "Employees connect through the VPN on every network that is not their home.", 0.9, False, "", "IT policy"),
    SeenChunk(2, "Hotel stays are reimbursed up to EUR 180 per night in Paris. Receipts are required for every claim.",
              0.5, False, "", "Travel policy"),
    SeenChunk(3, "Annual leave is 28 days a year. Unpaid leave needs the manager's approval.", 0.4, False, "", "Leave policy"),
]


def test_rerank_puts_the_answering_passage_first(packaged):
    order = judge.rerank("How much is a hotel night in Paris?", CHUNKS)
    assert order[0][0] == 2 and order[0][1] > 0.5 > order[-1][1]


def test_each_part_is_judged_on_its_own(packaged):
    judged = judge.judge_question("How much is a hotel night in Paris, and how many days of annual leave do I get?", CHUNKS)
    assert [p.answered for p in judged.parts] == [True, True] and judged.settled(found_by_words=False)
    assert judged.parts[0].quotes[0].chunk_id == 2 and "EUR 180" in judged.parts[0].quotes[0].sentence
    assert judged.parts[1].quotes[0].sentence == "Annual leave is 28 days a year."
    (still_open,) = judge.open_parts("How much is a hotel night in Paris, and who is the CEO?", CHUNKS)
    assert "CEO" in still_open


def test_a_question_asking_for_a_person_is_not_answered_by_a_passage_without_one(packaged):
    chunks = [SeenChunk(7, "Applies to all employees of Kestrel Analytics.", 0.5, False, "", "Leave policy")]
    judged = judge.judge_question("Who is the CEO of Kestrel Analytics?", chunks)
    assert judged.passage == 0.0 and not judged.parts[0].answered
    assert not judged.settled(found_by_words=True)


def test_a_header_of_labelled_fields_holds_no_person(packaged):
    header = SeenChunk(8, "Orrin Mills Handbook\n\nMaintainer: Facilities Desk. Applies to every Orrin site. "
                          "Effective 1 March 2026.", 0.5, False, "", "Orrin Mills Handbook")
    judged = judge.judge_question("Who is the treasurer of Orrin Mills?", [header])
    assert judged.passage == 0.0 and not judged.settled(found_by_words=True)


def test_the_calibrated_thresholds_decide(packaged, monkeypatch):
    judged = judge.judge_question("How much is a hotel night in Paris?", CHUNKS)
    assert judged.settled(found_by_words=True) and judged.settled(found_by_words=False)
    monkeypatch.setenv("GROUNDED_RELEVANCE_THRESHOLD", "0.9999")
    assert not judged.settled(found_by_words=True)


def test_a_flagged_chunk_is_never_a_quote(packaged):
    flagged = [SeenChunk(9, "Hotel stays are reimbursed up to EUR 900 per night in Paris.", 0.9, True, "", "Notes")]
    answer = compose_answer("How much is a hotel night in Paris?", [*flagged, *CHUNKS])
    assert "[c:2]" in answer and "[c:9]" not in answer and "EUR 900" not in answer


def test_the_answer_quotes_per_part_and_declines_what_nothing_answers(packaged):
    answer = compose_answer("How much is a hotel night in Paris?", CHUNKS)
    assert '"Hotel stays are reimbursed up to EUR 180 per night in Paris." [c:2]' in answer
    assert "VPN" not in answer and "Annual leave" not in answer
    declined = compose_answer("What is the capital of Australia?", CHUNKS)
    assert declined.startswith("NOT_ENOUGH_EVIDENCE")


def test_without_a_model_the_word_rules_decide(monkeypatch):
    monkeypatch.setenv("GROUNDED_RELEVANCE_MODEL", "none")
    assert not judge.enabled()
    assert judge.open_parts("How much is a hotel night in Paris?", CHUNKS) == []


MILLER = [
    SeenChunk(11, "Orrin Mills signed a supply contract with Kestrel Analytics in March, worth 4 million euros.", 0.5, False,
              "Harbour Post", "Supply deals"),
    SeenChunk(12, "The regulator in Valdoria opened an inquiry into the pricing of Orrin Mills flour.", 0.5, False,
              "Valdoria Times", "Flour inquiry"),
]


def test_a_question_pinning_down_enough_names_all_held_is_answered_whatever_its_score(packaged, monkeypatch):
    monkeypatch.setenv("GROUNDED_RELEVANCE_THRESHOLD", "0.9999")  # no score settles a question
    three = ("Which miller, reported by the Harbour Post as having signed a supply contract with Kestrel Analytics, "
             "faces an inquiry by the regulator in Valdoria over its flour pricing?")
    answer = compose_answer(three, MILLER)
    assert not answer.startswith("NOT_ENOUGH_EVIDENCE") and "[c:11]" in answer and "[c:12]" in answer
    # Two names held are not enough; a fourth name no chunk mentions declines it.
    two = "Which miller signed a supply contract with Kestrel Analytics and faces an inquiry by the regulator in Valdoria?"
    assert compose_answer(two, MILLER).startswith("NOT_ENOUGH_EVIDENCE")
    four = three.replace("?", ", and was praised by Mirela Danu?")
    assert compose_answer(four, MILLER).startswith('NOT_ENOUGH_EVIDENCE: none of the passages that come closest mentions "mirela danu"')


BRIDGE = [
    SeenChunk(21, "Harbour Works Ltd is a shipyard in Tromsø. Harbour Works Ltd was founded by Mira Olsen in 1998.",
              0.9, False, "", "Harbour Works Ltd"),
    SeenChunk(22, "Mira Olsen is a Norwegian engineer. She was born in Bergen in 1961. She enjoys sailing.",
              0.6, False, "", "Mira Olsen (engineer)"),
    SeenChunk(23, "Bergen is a city on the west coast of Norway. Its port handles ferries.", 0.4, False, "", "Bergen"),
]


def test_a_part_asked_of_a_thing_its_quote_only_names_is_answered_by_the_text_about_it(packaged):
    question = "In what year was the founder of Harbour Works Ltd born?"
    first = ("Harbour Works Ltd was founded by Mira Olsen in 1998.", 21)
    hop = judge.hop_quote(question, [first], BRIDGE, set())
    assert hop is not None and (hop.sentence, hop.chunk_id) == ("She was born in Bergen in 1961.", 22)
    assert "She was born in Bergen in 1961." in compose_answer(question, BRIDGE)
    # No second hop when the linked text adds nothing the part asks, or the first quote holds every word of it.
    unrelated = [BRIDGE[0], SeenChunk(22, "Mira Olsen enjoys sailing. Mira Olsen owns a red boat.", 0.6, False, "", "Mira Olsen")]
    assert judge.hop_quote(question, [first], unrelated, set()) is None
    assert judge.hop_quote("Who founded Harbour Works Ltd?", [("Harbour Works Ltd was founded by Mira Olsen in 1998.", 21)],
                           BRIDGE, set()) is None


def test_a_part_asked_of_a_thing_it_describes_needs_the_text_about_that_thing(packaged):
    question = "What is the county seat of the county where Lempford is located?"
    village = SeenChunk(31, "Lempford is a village in Brannock County. Its church dates from 1420.", 0.9, False, "", "Lempford")
    judged = judge.judge_question(question, [village])
    assert judged.settled(found_by_words=False)  # the passage naming the county reads as an answer to the model
    assert compose_answer(question, [village]).startswith("NOT_ENOUGH_EVIDENCE")
    county = SeenChunk(32, "Brannock County is a county in the north. The county seat is Harlow.", 0.5, False, "", "Brannock County")
    answer = compose_answer(question, [village, county])
    assert not answer.startswith("NOT_ENOUGH_EVIDENCE") and "The county seat is Harlow." in answer


def test_a_side_of_a_comparison_is_answered_only_by_quotes_that_name_it(packaged):
    question = "Who was born first, Ivan Petrovsky or Karl Maren?"
    sorokin = SeenChunk(1, "Maulana Ivan Sorokin (born 18 December 1837) is a Russian scholar and politician.",
                        1.0, False, "", "Ivan Sorokin")
    maren = SeenChunk(2, "Karl Maren (born 3 May 1840) was a German composer. He wrote six symphonies.", 1.0, False, "", "Karl Maren")
    journal = SeenChunk(3, "Its editors were Anna Petrovsky (Ivan Petrovsky Centre) and Richard Jolly.", 1.0, False, "", "Journal")
    # The model reads Sorokin's birth as an answer for Petrovsky's side; it names another man.
    judged = judge.judge_question(question, [sorokin, maren, journal])
    assert judged.parts[0].answered and judged.parts[0].quotes[0].chunk_id == 1
    answer = compose_answer(question, [sorokin, maren, journal])
    assert answer.startswith("NOT_ENOUGH_EVIDENCE") and "Ivan Petrovsky born first" in answer, answer
    petrovsky = SeenChunk(4, "Ivan Petrovsky (born 2 June 1831) was a Russian painter.", 1.0, False, "", "Ivan Petrovsky")
    answer = compose_answer(question, [sorokin, maren, journal, petrovsky])
    assert not answer.startswith("NOT_ENOUGH_EVIDENCE") and "[c:4]" in answer and "[c:2]" in answer, answer


def test_a_comparison_needing_both_sides_is_declined_when_one_is_not_found(packaged):
    question = "Which genus has a longer common name, Velloria or Quassima?"
    centaurea = SeenChunk(1, "Common names for this genus are starthistle, knapweed and loggerheads.", 1.0, False, "", "Centaurea")
    quassima = SeenChunk(2, "Quassima is a genus of flowers whose common name is lisianthus.", 1.0, False, "", "Quassima (genus)")
    answer = compose_answer(question, [centaurea, quassima])
    assert answer.startswith("NOT_ENOUGH_EVIDENCE") and '"Velloria genus longer common name"' in answer, answer
    assert "What the documents do say:" in answer and "[c:2]" in answer  # how far it got
    velloria = SeenChunk(3, "The common name of the genus Velloria is marsh star.", 1.0, False, "", "Velloria")
    answer = compose_answer(question, [centaurea, quassima, velloria])
    assert not answer.startswith("NOT_ENOUGH_EVIDENCE") and "[c:3]" in answer and "[c:2]" in answer, answer



def test_a_comparison_needing_both_sides_reads_each_sides_own_text(packaged):
    question = "Are Tomas Verlund and Ines Karrow both film directors?"
    karrow = SeenChunk(1, "Ines Karrow (born 1961) is a Danish film director and screenwriter.", 1.0, False,
                       "Ines Karrow wiki", "Ines Karrow")
    # A film's text naming a director of that name in passing: it may be a namesake, and says nothing of him otherwise.
    film = SeenChunk(2, "Blue Harbour is a 1958 drama film directed by Tomas Verlund and starring Ada Lind.", 1.0, False,
                     "Blue Harbour (film) wiki", "Blue Harbour (film)")
    answer = compose_answer(question, [karrow, film])
    assert answer.startswith("NOT_ENOUGH_EVIDENCE") and "Tomas Verlund" in answer, answer
    own = SeenChunk(3, "Tomas Verlund (born 1954) is a Swedish film director.", 1.0, False,
                    "Tomas Verlund (director) wiki", "Tomas Verlund (director)")
    answer = compose_answer(question, [karrow, film, own])
    assert answer.startswith("Yes") and "[c:3]" in answer and "[c:1]" in answer, answer


def test_the_judge_trace_records_what_a_replay_needs_and_never_changes_the_answer(packaged, monkeypatch, tmp_path):
    """Under GROUNDED_JUDGE_TRACE the provider also composes the model's own picks and seeks a converging
    name when the thresholds did not need them (bench/calibrate_relevance.py replays both); the answers
    are the ones given without the trace."""
    question = "What is the county seat of the county where Lempford is located?"
    village = SeenChunk(31, "Lempford is a village in Brannock County. Its church dates from 1420.", 0.9, False, "", "Lempford")
    cases = [(question, [village]), ("How much is a hotel night in Paris?", CHUNKS)]
    untraced = [compose_answer(q, chunks) for q, chunks in cases]
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("GROUNDED_JUDGE_TRACE", str(trace))
    assert [compose_answer(q, chunks) for q, chunks in cases] == untraced
    described, hotel = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    # the model settles the described thing, its own picks decline it (no text about Brannock County)
    assert described["best_passage"] >= 0.7 and not described["found_by_words"] and described["own_declines"]
    assert hotel["found_by_words"] and not hotel["own_declines"] and hotel["converged"] is False
