"""The name a question's facts converge on (agents.consensus): pure, over hand-made judgements."""

from __future__ import annotations

from agents.consensus import converging_name
from agents.judge import Judgement, PartJudgement, Quote

QUESTION = ("Who is the founder that, according to the Harbour Gazette, built a shipyard in Tromsø, "
            "sold it to a rival, and was later accused of hiding its debts?")


def _part(part: str, *sentences: str) -> PartJudgement:
    return PartJudgement(part, [Quote(s, i, 0.05) for i, s in enumerate(sentences, start=1)])


def _judged(*parts: PartJudgement, question: str = QUESTION) -> Judgement:
    return Judgement(question, 0.02, list(parts))


BUILT = _part("built a shipyard in Tromsø", "Orla Vance built the first dry dock in Tromsø in 1998.",
              "The Harbour Gazette covered the opening.")
SOLD = _part("sold it to a rival", "In 2011 Vance sold Harbour Works to Nordyard.", "Prices fell that year.")
ACCUSED = _part("was later accused of hiding its debts", "Prosecutors say Orla Vance hid the yard's debts from buyers.",
                "The Harbour Gazette asked Nordyard for comment.")


def test_the_name_every_part_s_closest_sentences_give_answers_the_question():
    found = converging_name(_judged(BUILT, SOLD, ACCUSED))
    # "Vance" is given for every part; the longer "Orla Vance", which holds it, is not given for "sold".
    assert found is not None and found.name == "Vance"
    assert [q.sentence for _part_, q in found.quotes] == [BUILT.quotes[0].sentence, SOLD.quotes[0].sentence,
                                                          ACCUSED.quotes[0].sentence]
    # The question's own names do not count ("Harbour Gazette" is given for two parts, and named by the question).
    assert converging_name(_judged(BUILT, ACCUSED)).name == "Orla Vance"


def test_no_convergence_without_a_name_for_every_part_or_for_a_question_that_asks_no_thing():
    unrelated = _part("was later accused of hiding its debts", "Debts at shipyards rose in 2012.", "Nordyard denies it.")
    assert converging_name(_judged(BUILT, SOLD, unrelated)) is None
    assert converging_name(_judged(BUILT)) is None  # one part: no facts to converge
    yes_no = "Did the Harbour Gazette report that the shipyard in Tromsø was sold and that its debts were hidden?"
    assert converging_name(_judged(BUILT, SOLD, ACCUSED, question=yes_no)) is None


def test_a_relative_which_after_a_noun_asks_for_nothing():
    statement = "I meant party boat whereas I can board alone with other passengers, not a charter boat which is very expensive!"
    assert converging_name(_judged(BUILT, SOLD, question=statement)) is None
    assert converging_name(_judged(BUILT, SOLD, question="Considering the Harbour Gazette, which founder sold a yard?")) is not None
