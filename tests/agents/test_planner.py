"""The question planner on hand-made facets (agents.planning; no database, no dataset)."""

from __future__ import annotations

from agents import planning
from agents.planning import Facets, GeneralPlanner, SubQuery

SOURCES = ["TechCrunch", "The Verge", "The Age", "FOX News - Health", "FOX News - Lifestyle", "The Roar | Sports Writers Blog"]
NEWS = Facets({"source": {v: 2 for v in SOURCES}}, dated=True)


def plan(question: str, values=SOURCES) -> list[SubQuery]:
    return GeneralPlanner().plan(question, Facets({"source": {v: 2 for v in values}}, dated=True))


def mentions(question: str) -> list[tuple[str, ...]]:
    return [m.values for m in planning.find_mentions(question, NEWS)]


def test_values_are_found_by_full_name_or_short_name_and_only_as_proper_nouns():
    aliases = planning.value_aliases(SOURCES)
    assert aliases["FOX News"] == ("FOX News - Health", "FOX News - Lifestyle")
    assert mentions("Did The Roar report it, and what did FOX News say at the age of 30?") == \
        [("The Roar | Sports Writers Blog",), ("FOX News - Health", "FOX News - Lifestyle")]
    assert mentions("What did The Roar | Sports Writers Blog say?") == [("The Roar | Sports Writers Blog",)]


def test_values_are_matched_with_the_case_rules_of_any_script():
    """Matching ignores case as Python's re does, beyond ASCII too ("İstanbul" names "Istanbul Daily"),
    and a text naming the same values twice finds both."""
    facets = Facets({"source": {"Istanbul Daily": 2, "TechCrunch": 3}})
    assert [m.values for m in planning.find_mentions("What did İstanbul Daily report?", facets)] == [("Istanbul Daily",)]
    twice = "Did TechCrunch agree with TECHCRUNCH’s later report?"
    assert [(m.start, m.values) for m in planning.find_mentions(twice, facets)] == [(4, ("TechCrunch",)), (26, ("TechCrunch",))]


def test_plan_gives_each_named_value_its_clause_and_date_window():
    q = ("Was the TechCrunch report published on October 31, 2023 consistent with the report from The Verge "
         "published after December 5, 2023?")
    subs = plan(q)[:2]
    assert [s.narrow for s in subs] == [(("source", ("TechCrunch",)),), (("source", ("The Verge",)),)]
    assert (subs[0].date_after, subs[0].date_before) == ("2023-10-31", "2023-11-01")
    assert (subs[1].date_after, subs[1].date_before) == ("2023-12-06", None)
    # Each its own clause first, then the question without publishers and dates (filters match those).
    rest = planning.without_facets(q, SOURCES)
    assert "TechCrunch" not in rest and "Verge" not in rest and "2023" not in rest
    assert subs[0].text == f"Was the TechCrunch report published on October 31, 2023 consistent with the report from  {rest}"
    assert subs[1].text == (" report published on October 31, 2023 consistent with the report from The Verge published after "
                            f"December 5, 2023? {rest}")


def test_a_question_naming_no_value_is_searched_as_is():
    assert plan("Who won the match?") == [SubQuery("Who won the match?")]


def test_interleave_takes_rank_one_of_every_list_first_without_duplicates():
    assert planning.interleave([[1, 2, 3], [4, 1, 5], [6]], k=5, key=lambda x: x) == [1, 4, 6, 2, 3]


def test_fact_segments_cut_a_question_into_the_facts_it_describes():
    sources = ["Sporting News", "Sportskeeda", "CBSSports.com"]
    question = ("Which NFL quarterback, featured in articles from Sporting News, Sportskeeda, and CBSSports.com, threw four "
                "touchdowns against the Cowboys, has accumulated significant fantasy points over recent games, but struggles "
                "with a decreased completion rate when under pressure?")
    segments = planning.fact_segments(question, sources)
    # Every content word counts, whatever the corpus's genre ("articles" as much as "touchdowns"): no
    # list of a genre's framing words is kept. The publishers (facet values) never count.
    assert segments == ["Which NFL quarterback  featured in articles from", "threw four touchdowns against the Cowboys",
                        "has accumulated significant fantasy points over recent games",
                        "struggles with a decreased completion rate when under pressure"]
    assert not any(s in seg for s in sources for seg in segments)
    # Pieces with too few content words join the next.
    assert planning.fact_segments("Who wrote it, and when was the long novel about whales published?") == [
        "Who wrote it  when was the long novel about whales published"]
    assert planning.fact_segments("Did the TechCrunch article say so?", ["TechCrunch"]) == []
    assert len(planning.fact_segments("What did the report say about hotel costs and meal allowances?")) == 1


def test_fuse_ranks_what_several_lists_agree_on_first():
    assert planning.fuse([[1, 2, 3], [3, 4]], rrf_k=60, key=lambda c: c) == [3, 1, 2, 4]
    assert planning.fuse([[1, 2], [3, 4]], rrf_k=60, key=lambda c: c) == [1, 3, 2, 4]  # ties: first seen first
    assert planning.fuse([], rrf_k=60, key=lambda c: c) == []


def test_a_value_named_with_two_dates_gets_a_search_per_date():
    q = ("Has the reporting of The Verge been consistent between the article about phones on October 19, 2023, "
         "and the one covering laptops on December 3, 2023?")
    subs = plan(q)[:2]
    assert [s.narrow for s in subs] == [(("source", ("The Verge",)),)] * 2
    assert [(s.date_after, s.date_before) for s in subs] == [("2023-10-19", "2023-10-20"), ("2023-12-03", "2023-12-04")]
    rest = planning.without_facets(q, SOURCES)
    assert subs[0].text == f" been consistent between the article about phones on October 19, 2023 {rest}"
    assert subs[1].text == f", and the one covering laptops on December 3, 2023 {rest}"


def test_clause_facts_give_each_fact_its_values_clause_and_date():
    sources = ["Polygon", "Engadget", "TechCrunch"]
    question = ("After the Polygon report on the Steam Deck OLED improvements published on November 9, 2023, and the "
                "Engadget review of the handheld battery life, did the two sources agree?")
    facets = Facets({"source": {v: 2 for v in sources}}, dated=True)

    def clause_facts(q: str):
        return planning.clause_facts(q, planning.find_mentions(q, facets), facets)

    subs = clause_facts(question)
    polygon = [s for s in subs if s.narrow == (("source", ("Polygon",)),)]
    engadget = [s for s in subs if s.narrow == (("source", ("Engadget",)),)]
    assert polygon and all((s.date_after, s.date_before) == ("2023-11-09", "2023-11-10") for s in polygon)
    assert any("Steam Deck OLED improvements" in s.text for s in polygon)
    assert engadget and all(s.date_after is None for s in engadget)
    assert any("handheld battery life" in s.text for s in engadget)
    assert not any("Polygon" in s.text or "Engadget" in s.text or "2023" in s.text for s in subs)
    # One publisher, or a clause that describes nothing ("reported by TechCrunch and Polygon"): none.
    assert clause_facts("Did the Polygon review praise the Steam Deck OLED screen?") == []
    assert clause_facts("Which company, as reported by TechCrunch and Polygon, makes the Steam Deck?") == []


def test_dates_are_read_with_the_month_names_of_every_supported_language():
    # English as before: "Month D, YYYY", ISO days, and the English words relating a date to the question.
    assert planning.date_window("the report of October 31, 2023") == ("2023-10-31", "2023-11-01")
    assert planning.date_window("after october 31, 2023") == ("2023-11-01", None)
    assert planning.date_window("before 2024-01-01") == (None, "2024-01-01")
    assert planning.date_window("on February 31, 2023") == (None, None)  # no such day
    # Day-month-year in the languages a corpus may be declared in (names from Django's translations).
    assert planning.date_window("Qu'a dit le rapport du 31 octobre 2023 ?") == ("2023-10-31", "2023-11-01")
    assert planning.date_window("Was stand am 31. Oktober 2023 im Bericht?") == ("2023-10-31", "2023-11-01")
    assert planning.date_window("¿Qué pasó el 31 de octubre de 2023?") == ("2023-10-31", "2023-11-01")
    assert planning.date_window("Что случилось 31 октября 2023 года?") == ("2023-10-31", "2023-11-01")
    assert planning.date_window("since 3 March 2024") == ("2024-03-03", None)
    # A figure next to a month is not a day unless the month is between two linking words or none.
    assert planning.date_window("the top 10 of May 2024") == (None, None)
    # A date is taken out of the search text in any of these languages.
    assert planning.without_facets("Was stand am 31. Oktober 2023 im Bericht?").split() == ["Was", "stand", "am", "im", "Bericht?"]


def test_calendar_words_of_any_supported_language_are_not_names():
    from agents.languages import month_numbers, weekday_names

    assert month_numbers("french")["octobre"] == 10 and month_numbers("russian")["октября"] == 10
    assert "octobre" not in month_numbers("german") and month_numbers("german")["oktober"] == 10
    assert month_numbers("simple") == month_numbers("english")  # no language: English only
    assert "montag" in weekday_names("german") and "montag" not in weekday_names("french")
    assert planning.named_terms("Was sagte Wozniak im Oktober, am Montag?") == ["wozniak"]
    assert planning.named_terms("Qu'a dit Wozniak en Octobre, le Lundi ?") == ["wozniak"]
