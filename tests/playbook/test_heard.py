"""The time of day a caller names, worked out in code (``playbook/heard.py``), and given to
the note of the stage that collects it (``FactSheet.given``)."""

from __future__ import annotations

from datetime import date

import pytest

from voice_server.playbook import Engine, load_playbook
from voice_server.playbook.heard import time_named

from .conftest import PLAYBOOKS


@pytest.mark.parametrize(("said", "time"), [
    # as Whisper wrote the benchmark's callers, and as they were spoken
    ("On Monday at 10 in the morning, please.", (10, 0)),
    ("On Monday at ten in the morning, please.", (10, 0)),
    ("On Tuesday at half past 2 in the afternoon, please.", (14, 30)),
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
