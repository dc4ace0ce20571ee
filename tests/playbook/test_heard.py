"""The time of day and the digits a caller names, worked out in code (``playbook/heard.py``),
and given to the note of the stage that collects them (``FactSheet.given``)."""

from __future__ import annotations

import json
from datetime import date

import pytest

from voice_server.playbook import Engine, load_playbook
from voice_server.playbook.heard import digits_said, time_named

from .conftest import PLAYBOOKS


@pytest.mark.parametrize(("said", "time"), [
    # as Whisper wrote the benchmark's callers, and as they were spoken
    ("On Monday at 10 in the morning, please.", (10, 0)),
    ("On Monday at ten in the morning, please.", (10, 0)),
    ("On Tuesday at half past 2 in the afternoon, please.", (14, 30)),
    ("On Tuesday at half pass 2 in the afternoon, please.", (14, 30)),  # heard so, 2026-12-02
    ("On Wednesday at 930 in the morning, please.", (9, 30)),
    ("On Wednesday at nine thirty in the morning, please.", (9, 30)),
    ("A table for two people at 7.30 in the evening, please.", (19, 30)),
    ("A table for 4 people at 8 o'clock tonight, please.", (20, 0)),
    ("A table for four people at seven fifteen tonight, please.", (19, 15)),
    ("A table for six people at half past eight in the evening, please.", (20, 30)),
    ("Four of us at half past nine tonight.", (21, 30)),
    ("Tomorrow morning at ten.", (10, 0)),
    ("Ten to eight in the evening.", (19, 50)),
    ("Twenty five past seven tonight.", (19, 25)),
    ("A quarter to nine p.m.", (20, 45)),
    ("At 9am.", (9, 0)),
    ("7:30pm", (19, 30)),
    ("At 14:30.", (14, 30)),
    ("At noon.", (12, 0)),
    # no half of the day said: the model decides, told the playbook's hours
    ("On Thursday at 11 o'clock, please.", None),
    ("Half past 10, please.", None),
    ("Then nine o'clock, please.", None),
    ("2029-12-31 at 10:00", None),
    ("On the 12th of March 2030 at half past two.", None),
    # not a time, or not one time
    ("On Tuesday a half pass to in the afternoon, please.", None),  # misheard
    ("A table for four in the evening, please.", None),  # four people
    ("Good morning, at seven please.", None),  # a greeting is no half of the day
    ("Yes I am, at seven.", None),  # "am" after no time
    ("My name is Tom Hardy.", None),
    ("At 10 in the morning, no, at 11 in the morning.", None),
    ("At seven in the morning or in the evening.", None),
])
def test_a_time_is_worked_out_only_when_the_words_settle_it(said: str,
                                                             time: tuple[int, int] | None) -> None:
    assert time_named(said) == time


def test_the_day_and_the_time_said_are_given_to_the_note() -> None:
    """The appointments' "On Monday at ten in the morning": both read with the note's keys,
    the name and the reason left to the model; "at eleven" to the model too."""
    sheet = Engine(load_playbook(PLAYBOOKS / "appointments.yaml")).sheets["scheduling"]
    friday = date(2029, 12, 28)
    assert sheet.given("On Monday at ten in the morning, please.", friday) == \
        {"date": "2029-12-31", "time": "10:00"}
    assert sheet.given("On Monday at eleven, please.", friday) == {"date": "2029-12-31"}
    props = sheet.note_format(sheet.given("At 2.30 in the afternoon.", friday)
                              )["json_schema"]["schema"]["properties"]
    assert props["time"] == {"enum": ["14:30"]} and props["date"] == {"type": "null"}


@pytest.mark.parametrize(("said", "runs"), [
    # as Whisper wrote the support benchmark's callers
    ("My account number is 8 7 6 5 4 3 2 1.", ["87654321"]),
    ("My count numbers 1 2 3 4 5 6 7 8", ["12345678"]),
    ("It's 1 2 3 4 5 6 7 8.", ["12345678"]),
    ("Account number eight seven six five, four three two one.", ["87654321"]),
    ("It's 1234-5678, not 9.", ["12345678", "9"]),
    ("My account is 12345678 and I have 2 routers.", ["12345678", "2"]),
    ("Someone said twenty, or twelve.", []),  # not digits said one by one
    ("Oh, I don't know it.", []),
])
def test_the_digits_said_are_read_run_by_run(said: str, runs: list[str]) -> None:
    assert digits_said(said) == runs


def test_the_digits_said_are_given_to_the_note_when_one_run_fits() -> None:
    """The support playbook's account number (``pattern: ^[0-9]{8}$``), said digit by digit:
    read with the note's keys, not written a digit a step; and what the check keeps."""
    sheet = Engine(load_playbook(PLAYBOOKS / "support.yaml")).sheets["line_check"]
    said = "My account number is 8 7 6 5 4 3 2 1."
    assert sheet.given(said) == {"account": "87654321"}
    assert sheet.accept(json.dumps(sheet.given(said)), said, None) == {"account": "87654321"}
    assert sheet.given("It's 1234 5678, and the router is 2 years old.") == \
        {"account": "12345678"}
    # no run that fits, or two: the model notes it (or null)
    assert sheet.given("It is 1 2 3 4, I think.") == {}
    assert sheet.given("Either 12345678 or 87654321.") == {}
    # a text without a pattern of digits (a name, a summary) is never given digits
    ticket = Engine(load_playbook(PLAYBOOKS / "support.yaml")).sheets["ticket"]
    assert "summary" not in ticket.given("It drops 12345678 times.")
    visit = Engine(load_playbook(PLAYBOOKS / "appointments.yaml")).sheets["scheduling"]
    assert "name" not in visit.given("My name is 12 34 56 78.")
