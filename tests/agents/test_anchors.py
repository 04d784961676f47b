"""An answer's evidence must mention what the question pins down (agents.anchors): its names, with
the figures that identify them, each in one chunk, by stem (one letter off in a long word) or by token."""

from __future__ import annotations

import pytest

from agents.anchors import from_own_text, missing_anchors, names, quotes_name, requirements, side_names, sides_compared
from agents.lexical import split_question
from agents.providers.offline import compose_answer
from agents.sufficiency import SeenChunk


def chunk(chunk_id: int, text: str, title: str = "") -> SeenChunk:
    return SeenChunk(chunk_id, text, 1.0, False, title, title)


@pytest.mark.parametrize("question, expected", [
    ("Who hosted the 16th Annual Young Hollywood Awards?", [("16th", "annual", "young", "hollywood", "awards")]),
    ("Who is the CEO of Kestrel Analytics?", [("kestrel", "analytics")]),  # an abbreviation has many forms
    ("Are both Jim McBride and Neil Jordan American?", [("jim", "mcbride"), ("neil", "jordan")]),  # "American" is asked of them
    ("What British singer hosted it?", []),
    ("What changed in the HR policy in 2019?", [("2019",)]),
    ("What changed in Windows 11?", [("windows", "11")]),
    ("Can I book 2 nights for EUR 4.50 on a 3-day trip?", []),  # quantities the asker supplies, and their currency
    ("Is a room at 120 EUR allowed?", []),
    ("The author of The Thing of It Is... is what Nationality?", [("thing",)]),  # "what Nationality" is the kind asked for
    ("How much does lunch cost in the canteen?", []),
    ("In March, what did Sygic announce?", [("sygic",)]),  # month names and a sentence's first word are not names
    ("Combien de jours par semaine peut-on télétravailler ?", []),
])
def test_names_are_what_a_question_pins_down(question, expected):
    assert names(question) == expected


def test_a_statement_is_the_askers_case_not_what_is_asked():
    assert requirements("I'm going to Lisbon next week. What is the hotel limit?") == []
    assert requirements("I'm going to Lisbon next week. What is the hotel limit in Porto?") == [[[("porto",)]]]


def test_either_option_of_a_choice_will_do():
    assert requirements("Which is drunk before bed, Hot toddy or Kir?") == [[[("hot",)], [("kir",)]]]
    evidence = [chunk(1, "Hot toddy is traditionally drunk before retiring for the night.", "Hot toddy")]
    assert missing_anchors("Which is drunk before bed, Hot toddy or Kir?", evidence) == []
    assert missing_anchors("Which is drunk before bed, Grog or Kir?", evidence) == ["grog"]


def test_the_words_of_one_name_must_be_in_one_chunk():
    evidence = [chunk(1, "Lempster is a town in Sullivan County.", "Lempster"), chunk(2, "East of the river lies a farm.")]
    assert missing_anchors("Where is East Lempster?", evidence) == ["east lempster"]
    assert missing_anchors("Where is East Lempster?", [chunk(3, "East Lempster is a village in Lempster.")]) == []


def test_a_neighbouring_thing_does_not_hold_the_anchor():
    fifteenth = [chunk(1, "The 15th Annual Young Hollywood Awards were hosted by Jessie J.", "Young Hollywood Awards")]
    assert missing_anchors("Who hosted the 16th Annual Young Hollywood Awards?", fifteenth) == ["16th annual young hollywood awards"]
    elsewhere = [*fifteenth, chunk(3, "The 16th century saw the first annual fairs.")]  # a name's words in one chunk
    assert missing_anchors("Who hosted the 16th Annual Young Hollywood Awards?", elsewhere) == ["16th annual young hollywood awards"]
    sixteenth = [chunk(2, "The 16th Annual Young Hollywood Awards were hosted by Kelly Osbourne.")]
    assert missing_anchors("Who hosted the 16th Annual Young Hollywood Awards?", sixteenth) == []


def test_figures_match_as_whole_tokens():
    assert missing_anchors("What changed in Windows 3.1?", [chunk(1, "Windows 3.11 changed the limits.")]) == ["windows 3.1"]
    assert missing_anchors("What changed in Windows 3.1?", [chunk(1, "Windows 3.1 changed the limits.")]) == []
    assert missing_anchors("What happened in 2019?", [chunk(1, "On 2019-05-01 the office moved.")]) == []


def test_names_match_by_stem_and_in_the_title():
    assert missing_anchors("What does Kestrel offer?", [chunk(1, "It offers training.", "Kestrel's catalogue")]) == []
    assert missing_anchors("What does Kestrel offer?", [chunk(1, "Falcon offers training.", "Catalogue")]) == ["kestrel"]


def test_a_long_name_misspelt_by_one_letter_is_held():
    evidence = [chunk(1, "Apratim Majumdar (born 1978) is an Indian classical musician.")]
    assert missing_anchors("What instrument does Apatim Majumdar play?", evidence) == []
    assert missing_anchors("What instrument does Aptm Majumdar play?", evidence) == ["aptm majumdar"]
    assert missing_anchors("Where is Bern?", [chunk(2, "Born in Basel, she moved.")]) == ["bern"]  # too short to be a typo


def test_an_extractive_answer_whose_quotes_miss_an_anchor_is_declined():
    chunks = [chunk(1, "The 15th Annual Young Hollywood Awards were hosted by Jessie J, a singer.", "Young Hollywood Awards")]
    answer = compose_answer("Who hosted the 16th Annual Young Hollywood Awards?", chunks)
    assert answer.startswith("NOT_ENOUGH_EVIDENCE") and '"16th annual young hollywood awards"' in answer, answer
    answer = compose_answer("Who hosted the 15th Annual Young Hollywood Awards?", chunks)
    assert "Jessie J" in answer and "[c:1]" in answer, answer


@pytest.mark.parametrize("question, parts, expected", [
    ("Are both Velloria and Quassima perennials?", ["Are both Velloria perennials", "Quassima perennials"], "every"),
    ("Which genus has a longer common name, Velloria or Quassima?", ["Velloria longer name", "Quassima longer name"], "every"),
    ("What do Velloria and Quassima have in common?", ["What do Velloria have in common", "Quassima have in common"], "every"),
    ("Which genus, Velloria or Quassima, grows in Chile?", ["Velloria grows chile", "Quassima grows chile"], "any"),
    ("Who owns the VPN, and which tool resets passwords?", ["Who owns the VPN", "which tool resets passwords"], None),
    ("Are both Velloria and Quassima perennials?", ["Are both Velloria and Quassima perennials"], None),
    # A number opening a title is part of the thing, not a word before it: the title still opens the question.
    ('What type of film are both "500 Velloria Nights" and "Quassima"?',
     ['What type of film are both "500 Velloria Nights"', '"Quassima" type film 500'], "every"),
    # A name opening with a number after "and"; what the question says before its subject is asked of both sides.
    ("What type of building does 12 Velloria Street and 40 Quassima Lane have in common?",
     split_question("What type of building does 12 Velloria Street and 40 Quassima Lane have in common?"), "every"),
    # ... not when the things are the object of its verb: one person associated with both, no sides.
    ("Who is the founder associated with Velloria Labs and Quassima Research?",
     ["Who is the founder associated with Velloria Labs", "Quassima Research"], None),
    # Two claims set side by side are not named things: no two names joined by "and" on two sides.
    ("Does the Herald say Velloria blooms, while the Courier says it wilts?",
     ["Does the Herald say Velloria blooms", "the Courier says it wilts"], None),
    # Things joined after the question's subject are not what it compares ("..., as reported by both A and B").
    ("Which genus, as reported by both Herald and Courier, blooms in May?",
     ["Which genus, as reported by both Herald blooms in May", "Courier blooms in May"], None),
    ("Did the Herald report on Velloria and Quassima before the Courier did?",
     ["Did the Herald report on Velloria and Quassima", "before the Courier reported on Velloria and Quassima"], None),
])
def test_a_question_setting_named_things_side_by_side_says_how_many_sides_it_needs(question, parts, expected):
    assert sides_compared(question, parts) == expected


def test_a_side_is_answered_only_by_quotes_that_name_it():
    question = "Which genus has a longer common name, Velloria or Quassima?"
    velloria, quassima = side_names(question, ["Velloria longer common name", "Quassima longer common name"])
    assert (velloria, quassima) == ([("velloria",)], [("quassima",)])
    other = "Common names for this genus are starthistle and knapweed.\nCentaurea\nCentaurea"
    assert not quotes_name(velloria, [other])
    assert quotes_name(velloria, [other, "Its common name is marsh star.\nVelloria\nVelloria"])
    assert quotes_name(quassima, ["Quassima is called lisianthus.\n\n"])


def test_a_name_both_sides_hold_is_neither_sides_own():
    question = "Are Buried Country and South of the Border both films?"
    parts = ["Are Buried Country of the Border both films", "South of the Border both films"]  # a split leaving a name on both
    assert side_names(question, parts) == [[("buried", "country")], [("south",)]]


def test_a_number_written_before_a_sides_name_opens_it():
    question = "What type of building does 12 Velloria Street and 40 Quassima Lane have in common?"
    velloria, quassima = side_names(question, split_question(question))
    assert (velloria, quassima) == ([("12", "velloria", "street")], [("40", "quassima", "lane")])
    assert not from_own_text(quassima, [("383 Quassima Lane", "383 Quassima Lane wiki")])  # another house on the lane
    assert from_own_text(quassima, [("40 Quassima Lane", "40 Quassima Lane wiki")])
    assert not from_own_text(quassima, [("Quassima Lane", "Quassima Lane wiki")])  # the street, not the house at 40
    # A number glued to the word before it belongs to that word ("Model-4 Velloria Street"), not to the name.
    assert side_names("Is Model-4 Velloria Street older than Quassima Lane?",
                      ["Model-4 Velloria Street older", "Quassima Lane older"])[0] == [("model",), ("velloria", "street")]


def test_a_sides_own_text_is_titled_with_it_or_by_a_name_it_gives():
    question = "Which band has released more albums, Marrow Lane or Ivo Rask's band Grey Fathom?"
    parts = ["Marrow Lane band released more albums", "Ivo Rask's band Grey Fathom band released more albums"]
    marrow, fathom = side_names(question, parts)
    assert from_own_text(marrow, [("Marrow Lane (band)", "Marrow Lane (band) wiki")])
    assert from_own_text(fathom, [("Ivo Rask", "Ivo Rask wiki")])  # the title is a name the side gives
    assert from_own_text(fathom, [("Grey Fathom", "Grey Fathom wiki")])
    assert not from_own_text(marrow, [("Harbour Records", "Harbour Records wiki")])  # a passing mention elsewhere
    assert not from_own_text(marrow, [])
