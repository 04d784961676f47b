"""Sufficiency and the offline provider's extractive answers: which sentence answers which part of a
question, the names a second hop follows, and when a question is declined. Names are invented."""

from __future__ import annotations

from agents.citations import is_not_enough_evidence


def test_a_part_is_supported_by_a_sentence_that_answers_it_not_by_words_found_anywhere():
    from agents.sufficiency import SeenChunk, answer_kind, hop_queries, parts_support

    film = SeenChunk(1, "Moonlight Harbour is a 1961 comedy film starring Dana Quillfeather as a harbour master. "
                        "It was shot in Brest.", 1.0, False, about="Moonlight Harbour")
    scattered = SeenChunk(2, "The post office opened. An actress visited. Diplomatic talks began.", 1.0, False)
    question = "Which diplomatic post did the actress who starred in Moonlight Harbour hold?"
    [best] = parts_support(question, [film, scattered])
    assert not best.supported  # the film's sentence identifies her; nothing says which post she held
    assert hop_queries(question, [film, scattered])[0].startswith("Dana Quillfeather")  # the name the evidence gives
    person = SeenChunk(3, "Quillfeather served as a diplomatic envoy and held the post of ambassador to Norway.", 1.0, False,
                       about="Dana Quillfeather")
    assert parts_support("Which diplomatic post did Dana Quillfeather hold?", [film, person])[0].supported
    assert answer_kind("In what year was it founded?") == "year" and answer_kind("Who directed it?") == "person"
    # The kind of answer asked for must be there: a year, not just the words.
    when = SeenChunk(4, "Brest harbour was founded by fishermen.", 1.0, False)
    assert parts_support("In what year was Brest harbour founded?", [when])[0].score < \
        parts_support("In what year was Brest harbour founded?", [SeenChunk(5, "Brest harbour was founded in 1631.", 1.0, False)])[0].score


def test_a_person_is_a_name_past_a_sentences_first_word_not_a_date_or_a_header_field():
    from agents.sufficiency import holds_answer_kind, passage_holds_answer_kind

    part = "Who is the treasurer of Orrin Mills"
    assert holds_answer_kind("person", "The treasurer of Orrin Mills is Tova Brandt.", part)
    assert not holds_answer_kind("person", "Invoices are paid monthly to Orrin.", part)  # a name the part gives, before a full stop
    assert not holds_answer_kind("person", "Effective 1 March 2026.", part)  # a month is no one
    assert not holds_answer_kind("person", "Maintainer: Facilities Desk.", part)  # a field about something else
    assert holds_answer_kind("person", "Treasurer: Tova Brandt.", part)  # a field the part asks about
    header = "Orrin Mills Handbook\n\nMaintainer: Facilities Desk. Applies to every Orrin site. Effective 1 March 2026."
    assert not passage_holds_answer_kind("person", header, part)  # a heading and sentences' first words name no one
    assert passage_holds_answer_kind("person", header + " Questions go to Tova Brandt.", part)


def test_a_text_mentioning_what_a_part_asks_about_in_passing_does_not_answer_it():
    from agents.sufficiency import SeenChunk, parts_support, subject_name

    assert subject_name("Are Dara Vell musicians") == "Dara Vell" and subject_name("What is the hotel limit in Lisbon") == ""
    passing = SeenChunk(1, "He managed the musical group Dara Vell & The Tides for a decade.", 1.0, False,
                        about="Jon Wolfe", title="Jon Wolfe")
    about = SeenChunk(2, "Dara Vell is an English musician and songwriter.", 1.0, False, about="Dara Vell", title="Dara Vell")
    assert not parts_support("Are Dara Vell and Pim Oort both musicians?", [passing])[0].answerable
    assert parts_support("Are Dara Vell and Pim Oort both musicians?", [about])[0].answerable


def test_a_yes_no_comparison_is_answered_from_each_parts_sentence():
    from agents.providers.offline import compose_answer
    from agents.sufficiency import SeenChunk, yes_no_verdict

    def chunk(i, text, title):
        return SeenChunk(i, text, 1.0, False, about=title)

    orchids = [chunk(1, "Velvetia is a genus of orchids native to the islands.", "Velvetia"),
               chunk(2, "Quorrelia is a hybrid of two orchid genera grown in greenhouses.", "Quorrelia")]
    assert yes_no_verdict("Are Velvetia and Quorrelia both orchids?", orchids) == "yes"
    magazines = [chunk(1, "Ranger Owl is a children's magazine about wildlife.", "Ranger Owl"),
                 chunk(2, "Court Weekly is a magazine about the sport of tennis.", "Court Weekly")]
    assert yes_no_verdict("Are Ranger Owl and Court Weekly both sports magazines?", magazines) == "no"
    people = [chunk(1, "Mira Stellan was a Swedish film director.", "Mira Stellan"),
              chunk(2, "Jon Grenz is an Austrian artist and film director.", "Jon Grenz")]
    assert yes_no_verdict("Were Mira Stellan and Jon Grenz of the same nationality?", people) == "no"
    assert yes_no_verdict("Who directed films?", people) is None  # not a yes/no question
    assert yes_no_verdict("Are Mira Stellan and Pol Unknown both directors?", people[:1]) is None  # a part unanswered
    # What is asked is the words both parts share, a name among them included ("in America"), held by
    # each part's sentence ("American" begins with "America"; "located" only frames the question).
    schools = [chunk(1, "Velm Institute is an American private college.", "Velm Institute"),
               chunk(2, "Oskar Brandt College is a college in Ohio, America.", "Oskar Brandt College")]
    assert yes_no_verdict("Are both Velm Institute and Oskar Brandt College located in America?", schools) == "yes"
    schools[1] = chunk(2, "Oskar Brandt College is a college in Uppsala, Sweden.", "Oskar Brandt College")
    assert yes_no_verdict("Are both Velm Institute and Oskar Brandt College located in America?", schools) == "no"
    # A part nothing answers, when a text about its subject is retrieved: what that text says is a "no".
    painters = [SeenChunk(1, "Mira Stellan was a Swedish film director.", 1.0, False, "Mira Stellan", "Mira Stellan"),
                SeenChunk(2, "Jon Grenz is an Austrian painter of harbours.", 1.0, False, "Jon Grenz", "Jon Grenz")]
    assert yes_no_verdict("Are both Mira Stellan and Jon Grenz Swedish film directors?", painters) == "no"
    assert not is_not_enough_evidence(compose_answer("Are both Mira Stellan and Jon Grenz Swedish film directors?", painters))


def test_which_of_two_options_is_answered_by_the_option_a_sentence_shows_unless_it_compares_them():
    from agents.lexical import choice_kind
    from agents.providers.offline import compose_answer
    from agents.sufficiency import SeenChunk

    chunks = [SeenChunk(1, "Ada Quell is a singer who plays guitar in the band Frost.", 1.0, False, "Ada Quell", "Ada Quell"),
              SeenChunk(2, "Bo Rennick is a painter from Oslo.", 1.0, False, "Bo Rennick", "Bo Rennick")]
    question = "Which musician, Ada Quell or Bo Rennick, plays in the band Frost?"
    assert choice_kind(question) == "property"
    answer = compose_answer(question, chunks)
    assert not is_not_enough_evidence(answer) and "[c:1]" in answer and "Not found in the documents" in answer
    # A comparison needs both sides: one option's date does not say which came first.
    compared = "Which was founded first, Ada Quell or Bo Rennick?"
    assert choice_kind(compared) == "comparison"
    assert is_not_enough_evidence(compose_answer(compared, chunks[:1]))
    # ... but each side's own text is its evidence, whatever words it uses ("opened" for "founded").
    dated = [SeenChunk(1, "Ada Quell gave its first concert in the capital in 1921.", 1.0, False, "Ada Quell", "Ada Quell"),
             SeenChunk(2, "Bo Rennick was formed in 1954.", 1.0, False, "Bo Rennick", "Bo Rennick")]
    answer = compose_answer("Which orchestra gave its first concert in the capital earlier, Ada Quell or Bo Rennick?", dated)
    assert not is_not_enough_evidence(answer) and "[c:1]" in answer and "[c:2]" in answer
    # A text about an option that does not say it has the property asked about answers nothing.
    assert is_not_enough_evidence(compose_answer(question, [chunks[1]]))


def test_an_extractive_answer_quotes_no_sentence_of_the_same_document_as_a_second_hop():
    from agents.providers.offline import compose_answer
    from agents.sufficiency import SeenChunk

    title = "Leave Policy"
    header = SeenChunk(1, "Owner: People Team. Applies to all employees.", 1.0, False, about=title, title=title)
    rule = SeenChunk(2, "Personal days added to a business trip count as annual leave.", 1.0, False, about=title, title=title)
    answer = compose_answer("Which leave applies to the extra days?", [header, rule])
    assert "count as annual leave" in answer and "Owner" not in answer  # the title is not a name the rule gives
    # A part whose best sentence an earlier part quoted is answered by it, not declined.
    both = compose_answer("What leave applies to personal days, and what counts as annual leave?", [rule])
    assert not both.startswith("NOT_ENOUGH_EVIDENCE") and both.count("[c:2]") == 2, both


def test_hops_look_up_a_name_no_document_is_about_and_read_the_named_documents_names_first():
    from agents.sufficiency import SeenChunk, hop_queries

    # The question names "Tide Lines"; nothing retrieved is about it: it is searched by name.
    festival = SeenChunk(1, "Screenings of documentaries take place at the Orrin Hall and the Velm Library.", 1.0, False,
                         about="Harbour Film Festival", title="Harbour Film Festival")
    question = "Are the documentaries Tide Lines and Salt Roads by the same director?"
    assert hop_queries(question, [festival])[0].startswith("Tide Lines")
    # "the author of Quiet Rooms": the names in the text about Quiet Rooms come before those of texts
    # that only share the question's words.
    novel = SeenChunk(2, "Quiet Rooms is a 1974 novel by Ada Quell.", 1.0, False, about="Quiet Rooms", title="Quiet Rooms")
    prize = SeenChunk(3, "The Brask Prize is given to an author of any nationality by the Orrin Society.", 1.0, False,
                      about="Brask Prize", title="Brask Prize")
    assert hop_queries("The author of Quiet Rooms is of what nationality?", [prize, novel])[0].startswith("Ada Quell")

    # Of the names no text is about, the one a relative clause follows is what it describes: looked up first.
    team = SeenChunk(4, "Coached by Ada Berg, the Norland Hawks reached the Final Eight.", 1.0, False,
                     about="2019 Norland Hawks team", title="2019 Norland Hawks team")
    question = "The 2019 Norland Hawks team, coached by Ada Berg, represented Velmont State University which was founded in what year?"
    assert hop_queries(question, [team])[0] == "Velmont State University founded year"


def test_a_relative_clause_holding_the_question_word_is_what_is_asked():
    from agents.sufficiency import split_relative

    assert split_relative("When was the palace founded at which Ada Quell died in 1435") == \
        ("When was the palace founded", "Ada Quell died in 1435")
    # The question is in the relative clause; what comes before it describes the subject.
    assert split_relative("The song Frost can be heard in a ride that debuted in what year") == \
        ("debuted in what year", "The song Frost can be heard in a ride")


def test_two_sentences_linked_by_a_name_answer_a_part_neither_answers_alone():
    from agents.providers.offline import compose_answer
    from agents.sufficiency import SeenChunk

    squadron = SeenChunk(1, "The Orrin Squadron flew the Velm Kestrel over the southern islands during the war.", 1.0, False,
                         "Orrin Squadron", "Orrin Squadron")
    aircraft = SeenChunk(2, "The Velm Kestrel is a Norwegian twin-engined bomber.", 1.0, False,
                         "Velm Kestrel", "Velm Kestrel")
    question = "Which Norwegian bomber was flown over the southern islands during the war?"
    answer = compose_answer(question, [squadron, aircraft])
    assert not is_not_enough_evidence(answer) and "[c:1]" in answer and "[c:2]" in answer
    # Without the text the first sentence names, nothing answers it.
    assert is_not_enough_evidence(compose_answer(question, [squadron]))


def test_month_and_day_names_are_no_names_to_hop_to():
    from agents.providers.offline import compose_answer
    from agents.sufficiency import SeenChunk, bridge_names, names_in

    assert names_in("It was a weekly paper published from 22 September 1722 until Monday 13 January 1728 by Velm Courier.") == \
        ["Velm Courier"]
    assert names_in("June Quell spoke in May.") == ["June Quell"]
    courier = SeenChunk(1, "The Velm Courier was a weekly paper published from 22 September 1722 until 13 January 1728.", 1.0,
                        False, "Velm Courier", "Velm Courier")
    festival = SeenChunk(2, "Tide Lines premiered on 26 September 2016 at the Orrin Film Festival in Brask.", 1.0, False,
                         "Tide Lines", "Tide Lines")
    question = "In what month is the annual film festival, that is presented by the weekly paper Velm Courier, held?"
    assert "September" not in bridge_names("is presented by the weekly paper Velm Courier", [courier, festival], top=1)
    # A festival that shares a month with the paper's dates is not the festival the paper presents.
    assert is_not_enough_evidence(compose_answer(question, [courier, festival]))


def test_a_part_the_answer_states_without_a_supporting_citation_is_unsupported():
    from agents.sufficiency import SeenChunk, unsupported_parts

    hotel = SeenChunk(1, "Hotel stays are reimbursed up to EUR 180 per night in capital cities.", 1.0, False)
    leave = SeenChunk(2, "Employees receive 25 days of annual leave per calendar year.", 1.0, False)
    question = "How much is a hotel night reimbursed, and how many days of annual leave do employees receive?"
    both = "Hotel stays are reimbursed up to EUR 180 per night. Employees receive 25 days of annual leave per year."
    assert unsupported_parts(question, both, [hotel, leave], [hotel, leave]) == []
    [part] = unsupported_parts(question, both, [hotel], [hotel, leave])  # the leave days stated, not cited
    assert "annual leave" in part
    # A part the answer does not speak to, or one nothing retrieved answers, is not held against it.
    assert unsupported_parts(question, "Hotel stays are reimbursed up to EUR 180 per night.", [hotel], [hotel, leave]) == []
    assert unsupported_parts(question, both, [hotel], [hotel]) == []
    assert unsupported_parts("How many days of annual leave do employees receive?", both, [hotel], [hotel, leave]) == []


def test_a_part_is_held_by_its_own_words_never_by_a_list_of_one_corpus_s_equivalents():
    # The core keeps no synonym list (any such list is one corpus's vocabulary): a part's terms are
    # held by the same stems only; meaning beyond words is the embedding search's and the judge's job.
    from agents.lexical import coverage, terms
    from agents.sufficiency import SeenChunk, parts_support

    assert coverage(terms("hotel costs"), terms("Hotel costs are reimbursed.")) == 1.0
    assert coverage(terms("hotel costs"), terms("Accommodation costs are reimbursed.")) == 0.5
    assert coverage(terms("Can I claim my wine?"), terms("Alcohol is never refunded.")) == 0.0
    lodging = SeenChunk(1, "Accommodation is reimbursed up to 120 EUR per night.", 1.0, False)
    hotel = SeenChunk(2, "Hotel stays are reimbursed up to 120 EUR per night.", 1.0, False)
    question = "How much is reimbursed per night for a hotel?"
    assert parts_support(question, [hotel])[0].supported and not parts_support(question, [lodging])[0].supported
