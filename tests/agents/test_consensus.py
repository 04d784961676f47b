"""The name a question's facts converge on (agents.consensus): pure, over hand-made judgements."""

from __future__ import annotations

from agents.consensus import COMMON_SHARE, converging_name
from agents.judge import Judgement, PartJudgement, Quote

QUESTION = ("Who is the founder that, according to the Harbour Gazette, built a shipyard in Tromsø, "
            "sold it to a rival, and was later accused of hiding its debts?")


def _part(part: str, *sentences: str) -> PartJudgement:
    return PartJudgement(part, [Quote(s, i, 0.05) for i, s in enumerate(sentences, start=1)])


def _judged(*parts: PartJudgement, question: str = QUESTION) -> Judgement:
    return Judgement(question, 0.02, list(parts))


def rare(names):
    """Every name in few of the caller's documents."""
    return {n: 0.02 for n in names}


BUILT = _part("built a shipyard in Tromsø", "Orla Vance built the first dry dock in Tromsø in 1998.",
              "The Harbour Gazette covered the opening.")
SOLD = _part("sold it to a rival", "In 2011 Vance sold Harbour Works to Nordyard.", "Prices fell that year.")
ACCUSED = _part("was later accused of hiding its debts", "Prosecutors say Orla Vance hid the yard's debts from buyers.",
                "The Harbour Gazette asked Nordyard for comment.")


def test_the_name_every_part_s_closest_sentences_give_answers_the_question():
    found = converging_name(_judged(BUILT, SOLD, ACCUSED), rare)
    # "Vance" is given for every part; the longer "Orla Vance", which holds it, is not given for "sold".
    assert found is not None and found.name == "Vance"
    assert [q.sentence for _part_, q in found.quotes] == [BUILT.quotes[0].sentence, SOLD.quotes[0].sentence,
                                                          ACCUSED.quotes[0].sentence]
    # The question's own names do not count ("Harbour Gazette" is given for two parts, and named by the question).
    assert converging_name(_judged(BUILT, ACCUSED), rare).name == "Orla Vance"


def test_no_convergence_without_a_name_for_every_part_or_for_a_question_that_asks_no_thing():
    unrelated = _part("was later accused of hiding its debts", "Debts at shipyards rose in 2012.", "Nordyard denies it.")
    assert converging_name(_judged(BUILT, SOLD, unrelated), rare) is None
    assert converging_name(_judged(BUILT), rare) is None  # one part: no facts to converge
    yes_no = "Did the Harbour Gazette report that the shipyard in Tromsø was sold and that its debts were hidden?"
    assert converging_name(_judged(BUILT, SOLD, ACCUSED, question=yes_no), rare) is None


def test_a_relative_which_after_a_noun_asks_for_nothing():
    statement = "I meant party boat whereas I can board alone with other passengers, not a charter boat which is very expensive!"
    assert converging_name(_judged(BUILT, SOLD, question=statement), rare) is None
    assert converging_name(_judged(BUILT, SOLD, question="Considering the Harbour Gazette, which founder sold a yard?"), rare) is not None


def test_a_name_most_of_the_documents_give_is_their_context_not_an_answer():
    asked = []

    def vance_everywhere(names):
        asked.extend(names)
        return {n: (0.9 if "Vance" in n else 0.02) for n in names}

    assert converging_name(_judged(BUILT, SOLD, ACCUSED), vance_everywhere) is None
    assert "Vance" in asked  # only names that converge are counted
    at_the_limit = converging_name(_judged(BUILT, SOLD, ACCUSED), lambda names: {n: COMMON_SHARE for n in names})
    assert at_the_limit is not None and at_the_limit.name == "Vance"
    # Without a way to count the caller's documents nothing converges: the name could be everyone's context.
    assert converging_name(_judged(BUILT, SOLD, ACCUSED), None) is None


def test_a_question_setting_named_things_side_by_side_asks_about_them_not_for_a_thing_it_describes():
    # Both parts' closest sentences name the festival the two films were shown at: no answer to what type they are.
    shown = "Both were shown at the Harbour Film Festival."
    first = _part('What type of film are both "500 Velloria Nights"', "'500 Velloria Nights' opened in 2005.", shown)
    second = _part('"Quassima" type film 500', "Quassima premiered in 2010.", shown)
    question = 'What type of film are both "500 Velloria Nights" and "Quassima"?'
    assert converging_name(_judged(first, second, question=question), rare) is None
    described = "Which festival showed a film that opened in 2005 and one that premiered in 2010?"
    assert converging_name(_judged(first, second, question=described), rare).name == "Harbour Film Festival"
