"""Quantities in questions and the numeric conditions sentences set on them (agents.quantities), and
how they decide which sentence answers a part (agents.sufficiency)."""

from __future__ import annotations

import pytest

from agents.quantities import Quantity, quantities, quantity_fit
from agents.sufficiency import SeenChunk, support


@pytest.mark.parametrize(("text", "expected"), [
    ("Which cabin class for a 7-hour flight?", [Quantity(7, "hour")]),
    ("Economy class is required for flights under six hours.", [Quantity(6, "hour", "<")]),
    ("Premium economy is allowed for flights of six hours or more.", [Quantity(6, "hour", ">=")]),
    ("Rooms are reimbursed up to EUR 180 per night in capitals and EUR 140 elsewhere.",
     [Quantity(180, "eur", "<="), Quantity(140, "eur")]),
    ("Every amount above $25 needs a receipt.", [Quantity(25, "usd", ">")]),
    ("Claims submitted after 90 days are refused.", [Quantity(90, "day", ">")]),
    ("Leave of at least 10 working days needs approval.", [Quantity(10, "work", ">=")]),
    ("The 1995 film won two of them.", []),  # a year; "two of" has no unit
])
def test_quantities_and_their_comparators(text, expected):
    assert quantities(text) == expected


def test_a_condition_admits_or_excludes_the_asked_quantity_of_its_unit_only():
    asked = quantities("Do I need approval for a 12-day trip costing EUR 900?")
    assert quantity_fit(asked, "Trips longer than ten days need a director's approval.") is True
    assert quantity_fit(asked, "Trips of up to 5 days are booked by the traveller.") is False
    assert quantity_fit(asked, "Spending above EUR 1,000 needs a second signature.") is False
    assert quantity_fit(asked, "The office is open 8 hours a day.") is None  # another unit
    assert quantity_fit(asked, "Last year's trip took 4 days.") is None  # a plain mention is no rule
    assert quantity_fit([], "Trips longer than ten days need approval.") is None


def chunk(chunk_id: int, text: str) -> SeenChunk:
    return SeenChunk(chunk_id, text, 1.0, False, "Travel Policy", "Travel Policy")


def test_the_sentence_whose_condition_admits_the_quantity_answers_the_part():
    """Both rules name flights and hours; only the second applies to a 7-hour flight, although the
    first shares more of the question's words ("class")."""
    under = chunk(1, "Economy class is required for flights under six hours.")
    over = chunk(2, "Premium economy is allowed for flights of six hours or more.")
    found = support("Which cabin class for a 7-hour flight", [under, over])
    assert found.sentence == over.text and found.answerable
    found = support("Which cabin class for a 3-hour flight", [under, over])
    assert found.sentence == under.text and found.answerable


def test_parts_without_a_quantity_score_as_before():
    text = "Economy class is required for flights under six hours."
    assert support("Which cabin class for flights", [chunk(1, text)]).score == support(
        "Which cabin class for flights", [chunk(1, "Economy class is required for flights.")]).score
