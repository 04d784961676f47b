"""Follow-ups resolved to things, not tokens (agents.conversation_text, pure): a pronoun stands for a
noun phrase of the last turn that can carry the new predicate, never a currency code, a unit, a
figure, a date or a code glued to a number; when nothing fits, the message is kept as typed and
carries the previous question's words for the search."""

from __future__ import annotations

import re

import pytest

from agents.conversation_text import resolve_followup
from agents.noun_phrases import noun_phrases

HOTEL = ("How much can I spend on a hotel night in Paris?",
         'Extractive answer.\n\n1. How much can I spend on a hotel night in Paris:\n'
         '   - "Hotel stays are reimbursed up to EUR 180 per night in capital cities." [c:3] (Travel and Expense Policy)\n'
         '   - "Keep the receipts of every stay." [c:5] (Travel and Expense Policy)')
FIGURES = "The kit costs USD 200, weighs 5 kg and is certified to ISO 9001 since March 2020; EUR 180 in Europe."


@pytest.mark.parametrize("message", ["Does it include breakfast?", "Does that include breakfast?", "does it include breakfast"])
def test_the_pronoun_after_a_hotel_question_is_the_hotel_phrase_never_the_currency(message):
    resolved = resolve_followup(message, [HOTEL])
    assert resolved.how == "pronoun" and resolved.retrieve
    assert "hotel night in Paris" in resolved.question and "breakfast" in resolved.question
    assert "EUR" not in resolved.question


def test_a_possessive_takes_the_phrase_as_its_owner():
    assert resolve_followup("What is its daily rate?", [HOTEL]).question == "What is the daily rate of the hotel night in Paris?"
    assert resolve_followup("Is its price higher in summer?", [HOTEL]).question == \
        "Is the price of the hotel night in Paris higher in summer?"


@pytest.mark.parametrize(("previous", "message"), [
    ("What does the kit cost?", "Does it apply abroad?"),
    ("How much is allowed?", "Does it apply abroad?"),
    ("What is allowed?", "Is that negotiable?"),
    ("What did the audit find?", "Does it change often?"),
])
def test_an_answer_full_of_figures_and_codes_never_gives_the_referent(previous, message):
    resolved = resolve_followup(message, [(previous, FIGURES)])
    for token in ("USD", "200", "kg", "ISO", "9001", "March", "2020", "EUR", "180"):
        assert not re.search(rf"\b{token}\b", resolved.question), (token, resolved)


def test_figure_labels_are_no_noun_phrases():
    found = [p.text for p in noun_phrases(FIGURES)]
    assert found and found[0].startswith("The kit")
    assert not any(re.search(r"USD|200|kg|ISO|9001|March|2020|EUR|180", p) for p in found), found
    assert [p.name for p in noun_phrases("Hotel stays are reimbursed up to EUR 180 per night.")] == [""]


@pytest.mark.parametrize(("message", "expected"), [
    ("when was he born?", "when was Jane Roe born?"),
    ("What is her nationality?", "What is Jane Roe's nationality?"),
    ("When did it open its first office?", "When did Acme open its first office?"),
])
def test_person_and_thing_pronouns_after_a_who_question(message, expected):
    turn = ("Who founded Acme?", '"Acme was founded in 1990 by Jane Roe, with USD 200 of savings." [c:1] (History of Acme)')
    assert resolve_followup(message, [turn]).question == expected


def test_a_pronoun_nothing_fits_keeps_the_message_and_carries_the_previous_question():
    resolved = resolve_followup("Does it apply abroad?", [("What is allowed?", "USD 200, 5 kg and ISO 9001.")])
    assert resolved.how == "context" and resolved.retrieve
    assert resolved.question.startswith("Does it apply abroad") and "allowed" in resolved.question
    assert not re.search(r"USD|kg|ISO|200", resolved.question)


@pytest.mark.parametrize(("previous", "phrases"), [
    ("How much can I spend on a hotel night in Paris?", ["a hotel night in Paris"]),
    ("What does the Travel and Expense Policy say about hotel stays?", ["the Travel and Expense Policy", "hotel stays"]),
    ("Who directed the film Blue Harbour?", ["the film Blue Harbour"]),
    ("What is the capital of France?", ["the capital of France"]),
    ("Does the policy cover taxis?", ["the policy"]),
    ("How long does parental leave last?", ["parental leave"]),
    ("Are hotel stays reimbursed?", ["hotel stays"]),
    ("When was the Eiffel Tower built?", ["the Eiffel Tower"]),
])
def test_noun_phrases_of_a_question_by_grammar_alone(previous, phrases):
    assert [p.text for p in noun_phrases(previous)] == phrases


@pytest.mark.parametrize(("previous", "message", "expected"), [
    ("What is the capital of France?", "How big is it?", "How big is the capital of France?"),
    ("What film did Jane Roe direct?", "When was it released?", "When was Blue Harbour released?"),
    ("Does the policy cover taxis?", "Does it cover trains?", "Does the policy cover trains?"),
    ("Are hotel stays reimbursed?", "Are they taxed?", "Are hotel stays taxed?"),
    ("Tell me about The Beatles.", "When did they split?", "When did The Beatles split?"),
])
def test_the_thing_a_pronoun_stands_for(previous, message, expected):
    answer = '"Blue Harbour is a 1999 drama film directed by Jane Roe." [c:4] (Blue Harbour)'
    assert resolve_followup(message, [(previous, answer)]).question == expected


def test_a_determiner_is_not_a_pronoun_and_counterparts_and_reformulations_still_work():
    assert resolve_followup("Is that hotel expensive?", [HOTEL]).question == "Is that hotel expensive?"
    assert resolve_followup("and for Lisbon?", [HOTEL]).question == "How much can I spend on a hotel night in Lisbon?"
    shorter = resolve_followup("shorter please", [HOTEL])
    assert (shorter.question, shorter.retrieve) == (HOTEL[0], False)


def test_an_answer_names_what_a_what_question_asked_for_only_when_the_question_named_no_thing():
    directed = ("What did Jane Roe direct?", '"Jane Roe directed Blue Harbour in 1999." [c:1] (Jane Roe)')
    assert resolve_followup("When was it released?", [directed]).question == "When was Blue Harbour released?"
    said = ("What does the Travel and Expense Policy say about hotel stays?", '"Book through the Voyager desk." [c:2] (Travel)')
    assert resolve_followup("and what does it say about flights?", [said]).question == \
        "and what does Travel and Expense Policy say about flights?"


def test_a_number_that_is_part_of_a_name_stays_with_it():
    assert resolve_followup("When did it land?", [("Tell me about Apollo 11.", "x")]).question == "When did Apollo 11 land?"
    assert resolve_followup("Is it certified?", [("What does the kit cost?", "Prices are in USD. The kit costs USD 200.")]).question \
        == "Is the kit certified?"


@pytest.mark.parametrize("message", [
    "Is it possible to pay the hotel by card?",  # an "it" that only opens the clause
    "Is the minibar charged separately? Can I claim it?",  # the message's own earlier sentence gives the thing
    "The receipt is lost. What if I never had it?",
])
def test_a_pronoun_that_does_not_point_back_is_left_alone(message):
    resolved = resolve_followup(message, [HOTEL])
    assert (resolved.question, resolved.how) == (message, "as_is")
