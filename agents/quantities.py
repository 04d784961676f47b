"""Quantities a question asks about, and the numeric conditions sentences set on them. Pure.

"Which cabin class for a 7-hour flight?" asks about 7 hours. "Economy class is required for flights
under six hours" sets a condition (< 6 hours) that 7 hours does not meet; "Premium economy is allowed
for flights of six hours or more" sets one (>= 6 hours) that it meets. Rules in policies, manuals and
contracts are written this way (thresholds on amounts, durations, distances, counts), and words alone
cannot tell the two sentences apart: both name flights and hours. `quantity_fit` can.

A quantity is a number (digits or an English number word) with the unit written after it ("7-hour",
"six hours", "30 days") or a currency written before it ("EUR 500", "$40"). Years (1000-2099 without a
unit or currency) are not quantities. Units are compared by stem, so "hours" and "7-hour" agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.lexical import STOPWORDS, stem

_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
    "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "ninety": 90, "hundred": 100,
}
_CURRENCIES = {"eur": "eur", "euro": "eur", "euros": "eur", "€": "eur", "usd": "usd", "$": "usd", "gbp": "gbp", "£": "gbp",
               "chf": "chf"}
_NUM = r"\d+(?:[.,]\d+)*|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
_CURRENCY = r"EUR|USD|GBP|CHF|€|\$|£"
_QUANTITY = re.compile(rf"(?:(?P<currency>{_CURRENCY})\s?(?P<amount>{_NUM})|(?P<number>\b(?:{_NUM}))(?:\s+|-)(?P<unit>[^\W\d_]+))",
                       re.I)
_AROUND = 30  # characters read before and after a quantity for its comparator

# Comparators written before the quantity ("under six hours") or after it ("six hours or more").
_BEFORE = (
    (re.compile(r"\b(?:under|below|less than|fewer than|shorter than|lower than|before)\s*$", re.I), "<"),
    (re.compile(r"\b(?:up to|at most|no more than|not more than|maximum of|max\.?|within|not exceeding)\s*$", re.I), "<="),
    (re.compile(r"\b(?:over|above|more than|longer than|greater than|higher than|exceeding|beyond|after)\s*$", re.I), ">"),
    (re.compile(r"\b(?:at least|minimum of|no less than|not less than|from)\s*$", re.I), ">="),
)
_AFTER = (
    (re.compile(r"^\s+(?:or|and)\s+(?:more|longer|above|over|greater|higher|up)\b", re.I), ">="),
    (re.compile(r"^\s+(?:or|and)\s+(?:less|fewer|under|below|shorter|lower)\b", re.I), "<="),
)


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str  # the unit's stem, or the currency code
    comparator: str = "="  # what a sentence says of it: "<", "<=", ">", ">=", or "=" (a plain mention)

    def admits(self, asked: Quantity) -> bool | None:
        """Does this condition admit the asked quantity? None when it is about another unit."""
        if asked.unit != self.unit:
            return None
        v, limit = asked.value, self.value
        return {"<": v < limit, "<=": v <= limit, ">": v > limit, ">=": v >= limit, "=": v == limit}[self.comparator]


def _number(text: str) -> float | None:
    text = text.lower()
    if text in _NUMBER_WORDS:
        return float(_NUMBER_WORDS[text])
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def quantities(text: str) -> list[Quantity]:
    """The quantities in `text`, each with the comparator written around it."""
    found = []
    for m in _QUANTITY.finditer(text):
        if m.group("currency"):
            value, unit = _number(m.group("amount")), _CURRENCIES[m.group("currency").lower()]
        else:
            value, word = _number(m.group("number")), m.group("unit").lower()
            if word in STOPWORDS or (m.group("number").isdigit() and 1000 <= int(m.group("number")) < 2100):
                continue  # "6 of them", or a year ("1995 film")
            unit = _CURRENCIES.get(word) or stem(word)
        if value is None:
            continue
        before, after = text[max(0, m.start() - _AROUND):m.start()], text[m.end():m.end() + _AROUND]
        comparator = next((c for pattern, c in _BEFORE if pattern.search(before)), None) or \
            next((c for pattern, c in _AFTER if pattern.search(after)), "=")
        found.append(Quantity(value, unit, comparator))
    return found


def quantity_fit(asked: list[Quantity], sentence: str) -> bool | None:
    """Whether `sentence` speaks to the quantities a question part asks about: True when a condition
    (or an equal mention) in it admits one of them, False when it sets conditions on their units that
    none of them meets, None when it says nothing about their units (or states other values plainly:
    a mention of 5 hours is no rule about 7)."""
    verdicts = [condition.admits(q) for condition in quantities(sentence) for q in asked]
    if any(v is True for v in verdicts):
        return True
    conditions = [c for c in quantities(sentence) if c.comparator != "=" and any(c.unit == q.unit for q in asked)]
    return False if conditions else None
