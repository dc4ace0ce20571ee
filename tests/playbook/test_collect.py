"""`collect`: what the note request holds, which noted values are kept, what is asked next."""

from __future__ import annotations

import json
import textwrap
from datetime import date, timedelta

import pytest

from voice_server.playbook import Engine, PlaybookLoadError, load_playbook, load_playbook_text
from voice_server.playbook.collect import NOTE_NAME, declined, standing_offer

from .conftest import PLAYBOOKS

PLAYBOOK = textwrap.dedent("""\
    id: t
    initial_stage: booking
    stages:
      booking:
        system_prompt: Take the booking.
        tools: [book, hours]
        collect:
          tool: book
          ask:
            party_size: For how many people?
            name: Your name, please?
          examples:
            - {said: "Hi there.", facts: {}}
            - {said: "Four of us at nine pm.", facts: {party_size: 4, time: "21:00"}}
      done: {}
    tools:
      book:
        description: Book a table.
        parameters:
          type: object
          properties:
            name: {type: string, x-from-caller: true, description: the caller's name}
            time: {type: string, pattern: "^[0-2]?[0-9]:[0-5][0-9]$"}
            party_size: {type: integer, minimum: 1, maximum: 12}
            note: {type: string}
          required: [time, party_size, name]
        handler: {python: "json:dumps"}
      hours: {handler: {python: "json:dumps"}}
    """)


@pytest.fixture
def engine() -> Engine:
    return Engine(load_playbook_text(PLAYBOOK))


def test_the_note_answer_is_json_with_every_argument_required_and_nullable(
        engine: Engine) -> None:
    fmt = engine.sheets["booking"].note_format()
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == NOTE_NAME
    schema = fmt["json_schema"]["schema"]
    assert schema["required"] == ["name", "time", "party_size", "note"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["party_size"] == {"anyOf": [
        {"type": "integer", "minimum": 1, "maximum": 12}, {"type": "null"}]}
    assert "x-from-caller" not in schema["properties"]["name"]["anyOf"][0]  # ours stay home


def test_a_detail_the_session_holds_may_only_be_noted_as_null(engine: Engine) -> None:
    """Its value came with the stage (a transition's `set`): the note cannot write over it."""
    sheet = engine.sheets["booking"]
    props = sheet.note_format(dict.fromkeys({"party_size", "unrelated"}))["json_schema"][
        "schema"]
    assert props["properties"]["party_size"] == {"type": "null"}
    assert props["required"] == ["name", "time", "party_size", "note"]
    assert props["properties"]["time"] == sheet.note_format()["json_schema"]["schema"][
        "properties"]["time"]


def test_the_note_prompt_shows_the_details_and_every_example_in_full(engine: Engine) -> None:
    messages = engine.sheets["booking"].note_messages("For how many people?", "Two, please.")
    assert [m["role"] for m in messages] == ["system", "assistant", "user"]
    system = messages[0]["content"]
    assert "book (Book a table)" in system and "- name: the caller's name" in system
    assert 'Caller: "Four of us at nine pm." -> ' + json.dumps(
        {"name": None, "time": "21:00", "party_size": 4, "note": None}) in system
    assert messages[2] == {"role": "user", "content": "Two, please."}
    assert engine.sheets["booking"].note_messages(None, "Hi")[1]["role"] == "user"


@pytest.mark.parametrize(("noted", "said", "kept"), [
    ({"party_size": 2, "time": "19:30", "name": None}, "Two of us at half past seven",
     {"party_size": 2, "time": "19:30"}),
    ({"party_size": 3}, "Three people", {"party_size": 3}),
    ({"party_size": 4}, "We are 4", {"party_size": 4}),
    ({"party_size": 2}, "A table for a couple", {"party_size": 2}),
    ({"party_size": 12}, "twelve of us", {"party_size": 12}),
    # a number nobody said is a guess, even beside another number
    ({"party_size": 2, "name": "John Doe", "time": "12:00"}, "Yes, please book it.", {}),
    ({"party_size": 4, "time": "20:30"}, "Then half past eight please.", {"time": "20:30"}),
    ({"party_size": 8}, "We are 18", {}),
    ({"time": "12:00", "note": "by the window"}, "Noon, by the window",
     {"time": "12:00", "note": "by the window"}),
    # a name must be made of the caller's words
    ({"name": "Mario Rossi"}, "My name is Mario Rossi.", {"name": "Mario Rossi"}),
    ({"name": "Caller's Name"}, "It's for tonight", {}),
    # each value must hold to its own schema; the rest of the answer still counts
    ({"time": "seven", "party_size": 40, "note": "window seat"}, "A window seat for forty",
     {"note": "window seat"}),
    ({"party_size": True}, "yes one", {}),
    ('{"time": "19:00"', "at seven", {}),  # not JSON
    ("[1, 2]", "one two", {}),
])
def test_noted_values_are_kept_only_when_they_hold_up(engine: Engine, noted, said,
                                                      kept) -> None:
    raw = noted if isinstance(noted, str) else json.dumps(noted)
    assert engine.sheets["booking"].accept(raw, said) == kept


OFFER = {"time": "21:00", "party_size": 4, "name": "Anna Smith", "note": "by the window"}


@pytest.mark.parametrize(("noted", "said", "kept"), [
    ({}, "Yes, that works.", {"time": "21:00", "party_size": 4, "note": "by the window"}),
    ({"time": "21:00"}, "Sure.", {"time": "21:00", "party_size": 4, "note": "by the window"}),
    ({}, "Okay, that’s fine.", {"time": "21:00", "party_size": 4, "note": "by the window"}),
    # the caller's own words first; a no takes nothing; a name is never taken from an offer
    ({"time": "21:30"}, "Yes, at half past nine.", {"time": "21:30", "party_size": 4,
                                                    "note": "by the window"}),
    ({"time": "21:00"}, "No, that's too late.", {}),
    ({"time": "21:00"}, "Okay, but not then.", {}),
    ({"time": "21:00"}, "Hmm.", {}),
])
def test_a_caller_who_says_yes_takes_what_a_tool_offered(engine: Engine, noted, said,
                                                        kept) -> None:
    sheet = engine.sheets["booking"]
    assert sheet.accept(json.dumps(noted), said, OFFER) == kept
    assert "party_size" not in sheet.accept(json.dumps(noted), said)  # no offer: not said
    bad = {"time": "nine", "party_size": 40}  # an offer is checked against the schemas too
    assert sheet.accept("{}", said, bad) == {}


@pytest.mark.parametrize(("note", "said", "kept"), [
    ("by the window", "A table by the window, please.", True),
    ("window seat", "Could we sit at the window?", True),
    ("haircut", "I need my hair cut.", True),  # the same letters, said apart
    # a text the caller's words do not back is a guess: an example's value, or the model's
    ("by the window", "Yes, that works.", False),
    ("birthday", "It's for the two of us.", False),
])
def test_a_noted_text_must_share_a_word_with_the_caller(engine: Engine, note, said,
                                                        kept) -> None:
    """A newcomer's playbook: the note wrote an example's "haircut" for "Yes, that works."
    over the caller's "beard trim"; a text with no word of the caller's is not kept."""
    assert ("note" in engine.sheets["booking"].accept(json.dumps({"note": note}), said)) == kept


def test_a_declined_offer_reopens_the_details_it_offered_another_value_for() -> None:
    facts = {"day": "2029-12-31", "time": "10:00", "name": "Ada"}
    offer = {"day": "2029-12-31", "time": "10:30"}
    assert declined(offer, facts, "No, that doesn't suit me.") == ["time"]
    assert declined(offer, facts, "Do you have anything later?") == ["time"]
    assert declined(offer, facts, "Yes, that's fine.") == []
    assert declined(None, facts, "No.") == []
    # the session's data is fixed: an offer neither changes it nor reopens it
    assert declined({"day": "2030-01-02", "time": "10:30"}, facts, "No.", fixed={"day"}) == [
        "time"]


def test_an_offer_stands_while_its_answer_is_the_last_thing_heard() -> None:
    said = "Sorry, we're fully booked at 8 pm. I can offer 9 pm. Would that work?"
    offer = {"time": "21:00"}
    assert standing_offer(offer, said, "All set!  " + said.replace(" I", "\nI")) == offer
    assert standing_offer(offer, said, "Sorry, we're fully booked at 8 pm.") is None  # cut off
    assert standing_offer(offer, said, "We have 9 pm free. Shall I book it?") is None  # model
    assert standing_offer({}, said, said) is None
    assert standing_offer(offer, said, None) is None


def test_questions_follow_the_ask_order_then_the_schema(engine: Engine) -> None:
    sheet = engine.sheets["booking"]
    assert sheet.required == ["party_size", "name", "time"]
    assert sheet.question({}) == "For how many people?"
    assert sheet.question({"party_size": 2}) == "Your name, please?"
    assert sheet.question({"party_size": 2, "name": "Ada"}) is None  # no ask text for time
    assert sheet.missing({"party_size": 2, "name": "Ada", "time": "19:00"}) == []


@pytest.mark.parametrize(("facts", "said", "question"), [
    ({}, "Hi, I'd like to book a table.", "For how many people?"),  # no number: no party
    ({}, "Hi, I'm Ada, I'd like to book.", "For how many people?"),  # a name comes later
    ({}, "A table for four, please.", None),  # the note may give the party size
    ({"party_size": 2}, "I'd like to book.", None),  # a name may be in any words
    ({"party_size": 2, "name": "Ada"}, "Hello.", None),  # no ask text for the time
])
def test_a_question_the_note_cannot_change_is_known_before_it(
        engine: Engine, facts: dict, said: str, question: str | None) -> None:
    assert engine.sheets["booking"].question_before_note(facts, said) == question


def test_the_answering_model_is_told_what_is_missing_and_cannot_call_the_tool(
        engine: Engine) -> None:
    state = engine.initial_state(0.0)
    state.facts = {"party_size": 2}
    plan = engine.plan(state, first_round=True)
    assert plan.tools == ("hours",)  # the engine calls `book` itself
    assert plan.system_prompt == "Take the booking."  # the same for every session: cached
    assert plan.context.startswith(
        'Details the caller gave: {"party_size": 2}. Still needed: name, time.')
    state.stage = "done"
    assert engine.plan(state, first_round=True).context == 'Known so far: {"party_size": 2}'


def test_facts_survive_a_restore_and_clear_history_forgets_them(engine: Engine) -> None:
    state = engine.initial_state(0.0)
    state.facts, state.called = {"name": "Ada"}, '{"name": "Ada"}'
    again = engine.restore(json.loads(json.dumps(state.to_dict())), 1.0)
    assert (again.facts, again.called) == ({"name": "Ada"}, '{"name": "Ada"}')
    pb = load_playbook_text(PLAYBOOK + textwrap.dedent("""\
        transitions:
          - {from: booking, to: done, when: {keyword: [restart]}, clear_history: true}
        """))
    other = Engine(pb)
    state = other.initial_state(0.0)
    state.facts, state.called = {"name": "Ada"}, "x"
    other.start_turn(state, "restart", 1.0)
    assert (state.stage, state.facts, state.called) == ("done", {}, "")


@pytest.mark.parametrize(("change", "message"), [
    ("tool: book", "collect.tool: unknown tool 'nope'"),
    ("party_size: For how many people?", "collect.ask.party_sise: book has no argument "
                                         "'party_sise'"),
    ("facts: {party_size: 4, time: \"21:00\"}", "collect.examples[1].facts.tme: book has no "
                                                "argument 'tme'"),
])
def test_mistakes_in_collect_are_located(change: str, message: str) -> None:
    broken = {"tool: book": "tool: nope",
              "party_size: For how many people?": "party_sise: For how many people?",
              "facts: {party_size: 4, time: \"21:00\"}": "facts: {party_size: 4, tme: \"21:00\"}"}
    text = PLAYBOOK.replace(change, broken[change])
    assert text != PLAYBOOK
    with pytest.raises(PlaybookLoadError) as err:
        load_playbook_text(text, file="pb.yaml")
    assert any(message in f"{issue.path}: {issue.message}" for issue in err.value.issues), \
        err.value.issues


def test_entering_a_collecting_stage_starts_a_fresh_collection() -> None:
    pb = load_playbook_text(PLAYBOOK + textwrap.dedent("""\
        transitions:
          - {from: booking, to: done, when: {keyword: [thanks]}}
          - {from: done, to: booking, when: {keyword: [again]}}
        """))
    engine = Engine(pb)
    state = engine.initial_state(0.0)
    state.facts = {"name": "Ada", "party_size": 2}
    engine.start_turn(state, "thanks", 1.0)
    assert state.facts == {"name": "Ada", "party_size": 2}  # later stages still know them
    engine.start_turn(state, "book again", 2.0)
    assert (state.stage, state.facts) == ("booking", {})


@pytest.mark.parametrize(("said", "day"), [
    ("Tomorrow at ten, please.", "2029-12-29"),
    ("The day after tomorrow.", "2029-12-30"),
    ("Today if you can.", "2029-12-28"),
    ("Monday then.", "2029-12-31"),
    ("Next Tuesday.", "2030-01-01"),
    ("On Friday.", "2030-01-04"),  # said on a Friday: next week's
    ("Not Monday, Wednesday please.", "2030-01-02"),
    ("At ten o'clock.", None),
])
def test_the_day_a_caller_names_is_worked_out_from_today(said, day) -> None:
    from datetime import date

    from voice_server.playbook.heard import day_named

    found = day_named(said, date(2029, 12, 28))  # a Friday
    assert (found.isoformat() if found else None) == day


def test_a_named_day_replaces_the_model_s_date_only_where_a_date_is_taken() -> None:
    from datetime import date

    pb = load_playbook_text(textwrap.dedent("""\
        id: dates
        initial_stage: booking
        stages:
          booking:
            tools: [visit]
            collect: {tool: visit}
        tools:
          visit:
            parameters:
              type: object
              properties:
                day: {type: string, pattern: "^\\\\d{4}-\\\\d{2}-\\\\d{2}$"}
                time: {type: string, pattern: "^\\\\d{2}:\\\\d{2}$"}
              required: [day, time]
            handler: {python: "json:dumps"}
        """))
    sheet = Engine(pb).sheets["booking"]
    noted = json.dumps({"day": "2029-01-07", "time": None})
    assert sheet.accept(noted, "Monday then.", today=date(2029, 12, 28)) == {"day": "2029-12-31"}
    assert sheet.accept(noted, "Monday then.") == {}  # no today: no number said, dropped
    later = json.dumps({"day": "2030-01-07", "time": None})  # a Monday a week later: said so
    assert sheet.accept(later, "Monday the 7th.", today=date(2029, 12, 28)) == {
        "day": "2030-01-07"}
    assert sheet.accept(later, "Tomorrow.", today=date(2029, 12, 28)) == {"day": "2029-12-29"}
    # a number said for the time is not a date: the 1.5B wrote today's date for "Half past
    # ten" (and the engine booked a slot that had begun)
    today_noted = json.dumps({"day": "2029-12-28", "time": "10:30"})
    assert sheet.accept(today_noted, "Half past ten, please.", today=date(2029, 12, 28)) == {
        "time": "10:30"}
    for said in ("On the 28th at half past ten.", "December 28 at half past ten.",
                 "Dec 28, 10:30."):
        assert sheet.accept(today_noted, said, today=date(2029, 12, 28)) == {
            "day": "2029-12-28", "time": "10:30"}, said


def test_a_lookup_the_model_makes_gets_the_details_the_caller_gave(engine: Engine) -> None:
    """`ground`: a detail the sheet collects too (same name, same type) is the caller's: what
    this message backs, else the noted fact; the model's value stays where neither holds one."""
    from datetime import date

    sheet = engine.sheets["booking"]
    lookup = load_playbook_text(PLAYBOOK.replace(
        "hours: {handler", "hours: {parameters: {type: object, properties: {time: {type: string},"
        " party_size: {type: string}, day: {type: string}}}, handler")).tools["hours"]
    facts = {"time": "21:00", "party_size": 4}

    def ground(args: dict, said: str) -> dict:
        return json.loads(sheet.ground(lookup, json.dumps(args), facts, said,
                                       date(2029, 12, 28)))

    # "Have passed in, please": no number said, so the noted time, not the model's guess
    assert ground({"time": "10:00", "day": "friday"}, "Have passed in, please.") == {
        "time": "21:00", "day": "friday"}
    assert ground({"time": "19:30"}, "Is half past seven free?") == {"time": "19:30"}
    # a detail of another type is not the sheet's; nothing noted: the model's value stays
    assert ground({"party_size": "two"}, "Hm.") == {"party_size": "two"}
    assert ground({"time": "19:30"}, "Hm.") == {"time": "21:00"}
    assert sheet.ground(lookup, "not json", facts, "Hi") == "not json"
    raw = '{"day": "sunday"}'
    assert sheet.ground(lookup, raw, facts, "Hi") is raw  # nothing shared: as the model wrote
    assert json.loads(sheet.ground(lookup, '{"time": "19:30"}', {}, "Hi")) == {"time": "19:30"}


@pytest.mark.parametrize(("time", "said", "kept"), [
    ("20:30", "Half past 8 in the evening, please.", True),
    ("19:00", "Half past 8 in the evening, please.", False),  # the 0.5B copied an example
    ("19:30", "Seven thirty tonight.", True),
    ("21:00", "At 9 pm.", True),
    ("20:30", "8.30 tonight.", True),
    ("20:30", "At 20:30.", True),
    ("18:30", "A table for five people at 630 in the evening, please.", True),  # Whisper's
    ("19:30", "At 1930.", True),
    ("19:30", "At 1975.", False),
    ("19:00", "A table for two people at 7.30 in the evening.", False),  # the 0.5B again
    ("19:30", "A table for two people at 7.30 in the evening.", True),
    ("19:30", "At 7 in the evening.", False),  # minutes nobody said
    ("20:00", "At 8 o'clock tonight.", True),
    ("20:15", "A quarter past eight.", True),
    ("09:30", "Half nine.", True),
    ("20:10", "Ten past eight.", True),
    ("20:25", "Twenty five past eight.", True),
    ("19:50", "Ten to eight.", True),
    ("19:20", "Seven twenty.", True),
    ("19:00", "I would like to book a table for two at seven.", True),  # "to": not minutes
    ("19:00", "Seven for twenty people.", True),
    ("10:00", "For Richard Hopper, 2029-12-31 at 10:00.", True),  # the date is no time
    ("20:30", "A table for three people at 8 30 tonight, please.", True),  # Whisper's
    ("20:00", "A table for three people at 8 30 tonight, please.", False),
    ("20:45", "Eight forty five.", True),
    ("12:00", "Noon, by the window.", True),
    ("19:45", "A quarter to eight.", True),
    ("10:00", "Have passed 10.", True),
    ("14:00", "Two people, please.", True),  # a number said for another detail: let through
    ("19:00", "Four people, please.", False),
])
def test_a_noted_time_needs_its_hour_said(engine: Engine, time: str, said: str,
                                          kept: bool) -> None:
    assert (engine.sheets["booking"].accept({"time": time}, said) == {"time": time}) is kept


@pytest.mark.parametrize(("said", "unsayable"), [
    ("Hi, I'd like to book a table.", {"time", "party_size"}),
    ("My name is Anna Smith.", {"time", "party_size"}),
    ("Four of us.", set()),
    ("At 9, please.", set()),
    ("At midday.", set()),  # a time all the same: 12:00 (given: it names its half of the day)
    ("A couple of us.", set()),
])
def test_a_message_without_a_number_gives_no_number_or_time(engine: Engine, said: str,
                                                            unsayable: set[str]) -> None:
    """The details a message cannot give are only null in its note's format (the embedded
    model reads them, not writes them), and that changes nothing: any value noted for them
    would have been dropped."""
    sheet = engine.sheets["booking"]
    assert sheet.unsayable(said) == unsayable
    assert {k: v for k, v in sheet.given(said).items() if v is None} == dict.fromkeys(unsayable)
    props = sheet.note_format(sheet.given(said))["json_schema"]["schema"]["properties"]
    assert [k for k, v in props.items() if v == {"type": "null"}] == \
        [k for k in props if k in unsayable]
    for noted in ({"time": "12:00", "party_size": 2}, {"time": "21:00", "party_size": 4},
                  {"time": "9:00", "party_size": 12}):
        assert not set(sheet.accept(json.dumps(noted), said)) & unsayable


@pytest.mark.parametrize(("schema", "needs"), [
    ({"type": "integer"}, True),
    ({"type": "string", "format": "date"}, True),
    ({"type": "string", "pattern": "^[0-2]?[0-9]:[0-5][0-9]$"}, True),
    ({"type": "string", "pattern": r"^\d{8}$"}, True),
    ({"type": "string", "pattern": r"^[A-Z]+\d*$"}, False),  # digits optional
    ({"type": "string", "pattern": r"^(\d{3})?[a-z]+$"}, False),
    ({"type": "string", "pattern": r"^[a-z]+|\d+$"}, False),  # alternatives
    ({"type": "string", "x-from-caller": True}, False),
    ({"type": "string", "enum": ["outage", "billing"]}, False),
])
def test_which_details_need_a_number_said(schema: dict, needs: bool) -> None:
    from voice_server.playbook.collect import _needs_a_number

    assert _needs_a_number(schema) is needs


@pytest.mark.parametrize(("said", "unsayable"), [
    ("Hello, I would like to book a table, please.", {"time", "party_size", "date"}),
    ("A table for two people at seven thirty, please.", {"date"}),
    ("A table for two people at 7.30, please.", {"date"}),  # digits of a time, not a date
    ("Half past 10, please.", {"date"}),
    ("On the 10th, at 7.30.", set()),
    ("For two on Monday at seven.", set()),  # a day named: worked out in code, or noted
    ("Tomorrow at seven, for two.", set()),
    ("On the 12th at seven, for two.", set()),
    ("March the twelfth, at seven, for two.", set()),
])
def test_a_date_needs_a_day_a_month_or_a_day_of_the_month_said(said: str,
                                                               unsayable: set[str]) -> None:
    sheet = Engine(load_playbook(PLAYBOOKS / "restaurant.yaml")).sheets["booking"]
    assert sheet.unsayable(said) == unsayable
    today = date(2026, 11, 29)
    for day in (today, today + timedelta(days=1), date(2026, 12, 7), date(2027, 3, 12),
                date(2026, 12, 10), date(2026, 12, 30)):
        noted = {"date": day.isoformat(), "time": "19:30", "party_size": 2}
        assert not set(sheet.accept(json.dumps(noted), said, None, today)) & unsayable


@pytest.mark.parametrize(("said", "given"), [
    ("On Monday at ten in the morning, please.", "2026-11-30"),
    ("Tomorrow at seven, for two.", "2026-11-30"),
    ("For two on Friday at half past eight.", "2026-12-04"),
    ("The day after tomorrow, at 9.", "2026-12-01"),
    ("Monday the 7th of December at ten.", None),  # a date of the month: the model notes it
    ("On Monday the seventh, at ten.", None),
    ("Monday the 14, at ten.", None),
    ("On Monday, 2026-12-14.", None),
    ("A table for two people at seven thirty, please.", None),  # no day named
])
def test_a_day_named_is_given_as_its_date(said: str, given: str | None) -> None:
    """The day a message names, without a date of the month, is given in the note's format
    (the embedded model reads it, not writes it: ~12 tokens), and it is what the check would
    have kept of any date noted for it that is not that day."""
    sheet = Engine(load_playbook(PLAYBOOKS / "appointments.yaml")).sheets["scheduling"]
    today = date(2026, 11, 29)  # a Sunday
    values = sheet.given(said, today)
    assert values.get("date") == given
    assert sheet.given(said).get("date") is None  # no today: no day worked out
    props = sheet.note_format(values)["json_schema"]["schema"]["properties"]
    if given is None:
        assert "enum" not in props["date"]  # noted by the model, or null when unsayable
        return
    assert props["date"] == {"enum": [given]}
    for noted in (None, today.isoformat(), "2027-03-10", (today + timedelta(days=3)).isoformat()):
        facts = sheet.accept(json.dumps({"date": noted, "time": None}), said, None, today)
        assert facts["date"] == given, noted
