"""``collect.confirm``: the read-back's words, which replies are a yes or a no, and its checks.

The conversation itself (read back, corrected, asked what to change, booked on a yes) is the
scenario ``playbooks/tests/restaurant_read_back.yaml``, run through the wire by
test_scenarios.py.
"""

from __future__ import annotations

import json
import textwrap
from datetime import date

import pytest

from tests.support.fake_openai import FakeOpenAI
from voice_server.llm import LLMRouter
from voice_server.pipeline.turn import TurnContext
from voice_server.playbook import (
    Engine,
    PlaybookLoadError,
    PlaybookResponder,
    load_playbook,
    load_playbook_text,
)
from voice_server.playbook.confirm import confirms, not_yet, read_back, refuses
from voice_server.playbook.heard import words_heard
from voice_server.protocol import Message

from .conftest import PLAYBOOKS

PLAYBOOK = textwrap.dedent("""\
    id: t
    initial_stage: booking
    stages:
      booking:
        collect:
          tool: book
          confirm:
            say: "A table for {party_size} {date} at {time}, under {name}. Shall I book it?"
    tools:
      book:
        parameters:
          type: object
          properties:
            name: {type: string}
            time: {type: string, pattern: "^[0-2]?[0-9]:[0-5][0-9]$"}
            party_size: {type: integer}
            date: {type: string, format: date}
          required: [name, time, party_size]
        handler: {python: "json:dumps"}
    """)
TODAY = date(2029, 12, 28)  # a Friday
SPELL = "Sorry, could you spell the name for me?"


@pytest.mark.parametrize(("facts", "said"), [
    ({"name": "Lord Chen", "time": "20:30", "party_size": 6},  # no day given: none said
     "A table for 6 at 8:30 pm, under Lord Chen. Shall I book it?"),
    ({"name": "Ann", "time": "12:00", "party_size": 2, "date": "2029-12-28"},
     "A table for 2 today at 12 pm, under Ann. Shall I book it?"),
    ({"name": "Ann", "time": "19:00", "party_size": 2, "date": "2029-12-29"},
     "A table for 2 tomorrow at 7 pm, under Ann. Shall I book it?"),
    ({"name": "Ann", "time": "09:15", "party_size": 1, "date": "2030-01-07"},
     "A table for 1 on Monday 7 January at 9:15 am, under Ann. Shall I book it?"),
    ({"name": "Ann", "time": "soon", "party_size": 2, "date": "someday"},  # read as it is
     "A table for 2 someday at soon, under Ann. Shall I book it?"),
])
def test_the_details_are_read_back_as_a_caller_should_hear_them(facts: dict, said: str) -> None:
    sheet = Engine(load_playbook_text(PLAYBOOK)).sheets["booking"]
    assert read_back(sheet, facts, TODAY) == said


def test_without_today_a_date_is_said_by_its_name() -> None:
    sheet = Engine(load_playbook_text(PLAYBOOK)).sheets["booking"]
    facts = {"name": "Ann", "time": "19:00", "party_size": 2, "date": "2029-12-29"}
    assert read_back(sheet, facts, None) == \
        "A table for 2 on Saturday 29 December at 7 pm, under Ann. Shall I book it?"


@pytest.mark.parametrize("said", ["Yes.", "Yes, please book it.", "That's right.", "Go ahead.",
                                  "Yeah, correct.", "Sure", "Yes, that\u2019s right."])
def test_a_plain_yes_confirms(said: str) -> None:
    assert confirms(said) and not refuses(said)


@pytest.mark.parametrize("said", ["No.", "No, that's wrong.", "Not quite.", "That's incorrect.",
                                  "Nope, change the time."])
def test_a_no_refuses(said: str) -> None:
    assert refuses(said) and not confirms(said)


@pytest.mark.parametrize("said", ["Yes, but make it eight.", "Is there parking?", "Hmm.",
                                  "Wait, actually...", ""])
def test_anything_else_is_neither(said: str) -> None:
    assert not confirms(said) and not refuses(said)


def test_the_change_question_has_a_default_and_may_be_given() -> None:
    pb = load_playbook_text(PLAYBOOK)
    assert pb.stages["booking"].collect.confirm.change == "What should I change?"
    own = load_playbook_text(PLAYBOOK.replace(
        "Shall I book it?\"", "Shall I book it?\"\n        change: Which detail is wrong?"))
    assert own.stages["booking"].collect.confirm.change == "Which detail is wrong?"


def test_a_read_back_naming_no_argument_of_the_tool_is_refused() -> None:
    """A typo would be read out to every caller as "{nmae}"."""
    with pytest.raises(PlaybookLoadError) as err:
        load_playbook_text(PLAYBOOK.replace("under {name}", "under {nmae}"), file="pb.yaml")
    assert [f"{i.path}: {i.message}" for i in err.value.issues] == [
        "stages.booking.collect.confirm.say: {nmae}: book has no argument 'nmae' (its "
        "arguments: date, name, party_size, time)"]


@pytest.mark.parametrize(("noted", "said", "answer"), [
    ({"name": "Lord Chen"}, "No, the name is Lord Chen.", SPELL),
    ({"name": "Lord Chen"}, "It's Lord Chen.", SPELL),
    ({"time": "20:30"}, "No, at half past eight.", "What should I change?"),  # not spelled
    ({}, "No.", "What should I change?"),
    ({}, "Is there parking?", None),  # the model's to answer
])
def test_a_reply_that_changes_nothing(noted: dict, said: str, answer: str | None) -> None:
    sheet = Engine(load_playbook_text(PLAYBOOK)).sheets["booking"]
    assert not_yet(sheet, noted, said) == answer


@pytest.mark.parametrize(("said", "spelled"), [
    ("Laura, L-A-U-R-A, Chen, C-H-E-N.", {"laura", "chen"}),  # Whisper's hyphens
    ("It's C-H-E-N.", {"chen"}),
    ("and a Smith S M I T H.", {"smith"}),  # capitals apart
])
def test_a_word_spelled_out_is_heard(said: str, spelled: set[str]) -> None:
    assert spelled <= words_heard(said)


def test_letters_apart_are_no_word() -> None:
    assert words_heard("Plan A, B or C") == {"plan", "a", "b", "or", "c"}


@pytest.mark.parametrize(("heard", "books"), [
    ("That's a table for 2 at 7 pm,", False),  # "Yes." over it: the name was not heard
    ("That's a table for 2 at 7 pm, under Mario Rossi.", True),  # every detail heard
])
async def test_a_yes_over_a_read_back_cut_short(fake: FakeOpenAI, router: LLMRouter, heard: str,
                                                books: bool) -> None:
    """A caller who says yes over the read-back before hearing every detail hears it again;
    one who heard them all is booked."""
    fake.add('{"name": null, "time": null, "party_size": null}')
    facts = {"name": "Mario Rossi", "party_size": 2, "time": "19:00"}
    full = "That's a table for 2 at 7 pm, under Mario Rossi. Shall I book it?"
    state = {"playbook": "restaurant", "stage": "booking", "facts": facts,
             "read_back": json.dumps(facts, sort_keys=True)}
    history = [{"role": "user", "content": "It's Mario Rossi."},
               {"role": "assistant", "content": heard, "interrupted": True, "full_text": full}]
    events: list[Message] = []

    async def emit(message: Message) -> None:
        events.append(message)

    async with PlaybookResponder(load_playbook(PLAYBOOKS / "restaurant.yaml"), router) as pb:
        ctx = TurnContext(history=history, user_message={"role": "user", "content": "Yes."},
                          emit=emit, state=state)
        said = "".join([piece async for piece in pb.respond(ctx)])
    if books:
        assert "booked under Mario Rossi" in said and ctx.state["stage"] == "confirmation"
    else:
        assert (said, events, ctx.state["stage"]) == (full, [], "booking")
