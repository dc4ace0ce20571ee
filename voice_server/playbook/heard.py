"""The day, the time of day and the digits a caller names, worked out in code (pure).

A collecting stage (``collect.py``) gives such a value to the note before the model reads it
(``FactSheet.given``): a small model writes a wrong date for "Monday" even with the week's
dates in front of it, and a date or a time it writes costs ~7-12 steps (~0.5-0.9 s on 2
cores) that a value read with the note's keys does not; an account number said digit by digit
is one step a digit. Only what the words settle is worked out here; anything else ("at
seven": morning or evening?) is left to the model, which has the playbook's description of
its hours.
"""

from __future__ import annotations

import re
from datetime import date as Date
from datetime import timedelta

from ..pipeline.readings import ONES, TENS

__all__ = ["WORDS", "WRITTEN_DATE", "day_named", "digits_said", "time_named", "words_heard"]

WORDS = re.compile(r"[^\W_]+")  # a message's words, as collect.py reads them too
# a word spelled out, as Whisper writes it: "L-A-U-R-A", or capitals apart "S M I T H"
_SPELLED = re.compile(r"\b[A-Za-z](?:-[A-Za-z]\b)+|\b[A-Z](?:[ ,.]+[A-Z]\b){2,}")
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
WRITTEN_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}")
# a time's words: "7:30", "7.30", digits, words ("o'clock" as one)
_TOKENS = re.compile(r"\d{1,2}[:.]\d{2}(?!\d)|\d+|[a-z]+(?:'[a-z]+)?")
_CLOCK_WORDS = frozenset([*ONES, *TENS, "o'clock"])
_PARTS_OF_DAY = {"morning": "am", "afternoon": "pm", "evening": "pm"}
_QUARTERS = {"half": 30, "quarter": 15}
_DIGIT = r"(?:\d+|" + "|".join(ONES[:10]) + ")"
# digits said one after another: "8 7 6 5, 4 3 2 1", "8765-4321", "eight seven six five"
_DIGIT_RUN = re.compile(rf"\b{_DIGIT}(?:[\s,.-]+{_DIGIT})*\b")


def words_heard(said: str) -> set[str]:
    """The words of ``said``, lower-cased, and those it spells out: "Laura, L-A-U-R-A, Chen,
    C-H-E-N." and "It's C-H-E-N." both give "chen" (a caller asked to spell a name that
    Whisper keeps hearing wrong)."""
    spelled = {"".join(WORDS.findall(run)).lower() for run in _SPELLED.findall(said)}
    return set(WORDS.findall(said.lower())) | spelled


def day_named(said: str, today: Date) -> Date | None:
    """The day ``said`` names relative to ``today``: "today", "tomorrow", "the day after
    tomorrow", a weekday (the next one after today: "Monday" said on a Monday is next week's;
    of two, the last: "not Monday, Tuesday")."""
    text = said.lower()
    words = WORDS.findall(text)
    if "after tomorrow" in text:
        return today + timedelta(days=2)
    if "tomorrow" in words:
        return today + timedelta(days=1)
    if "today" in words:
        return today
    for word in reversed(words):
        if word in _WEEKDAYS:
            return today + timedelta(days=(_WEEKDAYS.index(word) - today.weekday() - 1) % 7 + 1)
    return None


def digits_said(said: str) -> list[str]:
    """Each run of digits ``said`` holds, its digits joined: "My account number is 8 7 6 5 4
    3 2 1." -> ["87654321"]; "eight seven six five, four three two one" -> ["87654321"];
    "It's 1234 5678, not 9" -> ["12345678", "9"]. Digits only: "twelve" or "oh" are not
    one (a number word of two digits, an interjection)."""
    return ["".join(d if d.isdigit() else str(ONES.index(d)) for d in re.findall(_DIGIT, run))
            for run in _DIGIT_RUN.findall(said.lower())]


def time_named(said: str) -> tuple[int, int] | None:
    """The time of day ``said`` names as (hour, minutes) on a 24-hour clock, when it names
    one and says which half of the day it is in ("ten in the morning", "half past 2 in the
    afternoon", "7.30 pm", "eight o'clock tonight", "noon") or says it on a 24-hour clock
    ("14:30"). None for no time, two times, both halves of the day, or an hour of either
    half ("at seven", "eleven o'clock").

    A number is a time's hour only where a time's words go with it: "at" before it, or
    minutes, "o'clock", "am"/"pm", "tonight" or "in the morning" after it, or "half past"
    before it; after "for", only minutes, "o'clock" or "am"/"pm" ("a table for four in the
    evening" names no time)."""
    text = WRITTEN_DATE.sub(" ", said.lower().replace("a.m.", "am").replace("p.m.", "pm"))
    # Whisper writes "half pass 2" for "half past two" said with its t dropped; "pass" names
    # a time only where "past" would: after its minutes, before the hour
    words = ["past" if word == "pass" else word for word in _TOKENS.findall(text)]
    times = {hhmm for i in range(len(words)) if (hhmm := _time_at(words, i)) is not None}
    times |= {(12, 0) for w in ("noon", "midday") if w in words}
    times |= {(0, 0) for w in ("midnight",) if w in words}
    if len(times) != 1:
        return None
    [(hour, minutes)] = times
    halves = _halves(words)
    if hour > 12 or hour == 0 or (hour == 12 and not halves):
        return hour, minutes  # a 24-hour clock, or noon
    if len(halves) != 1:
        return None
    return (hour % 12 + 12 if halves == {"pm"} else hour % 12), minutes


def _halves(words: list[str]) -> set[str]:
    """The halves of the day the words name: "am"/"pm" after a time, "in the morning",
    "this evening", "tonight" (not "Good morning")."""
    out = set()
    for j, word in enumerate(words):
        before = words[j - 1] if j else ""
        if word in ("am", "pm") and (before[:1].isdigit() or before in _CLOCK_WORDS):
            out.add(word)  # not "I am"
        elif word in _PARTS_OF_DAY and before != "good":
            out.add(_PARTS_OF_DAY[word])
        elif word == "tonight":
            out.add("pm")
    return out


def _time_at(words: list[str], i: int) -> tuple[int, int] | None:
    """The time whose hour is ``words[i]``, if the words around it make it one."""
    hour = _hour(words[i])
    if hour is None:
        clock = re.fullmatch(r"(\d{1,2})[:.](\d{2})", words[i])
        if clock and int(clock.group(1)) < 24 and int(clock.group(2)) < 60:
            return int(clock.group(1)), int(clock.group(2))
        if re.fullmatch(r"[1-9]\d{2}", words[i]) and int(words[i][1:]) < 60:
            return int(words[i][0]), int(words[i][1:])  # Whisper's "930 in the morning"
        return None
    before, after = words[max(0, i - 3):i], words[i + 1:i + 4]
    if after[:1] in (["past"], ["to"]):
        return None  # the minutes of "ten to eight"
    if before[-1:] in (["past"], ["to"]) and (minutes := _minutes_before(before)):
        return (hour, minutes) if before[-1] == "past" else ((hour - 1) % 24, 60 - minutes)
    if after[:1] == ["o'clock"]:
        return hour, 0
    if (minutes := _minutes_after(after)) is not None:
        return hour, minutes
    if after[:1] in (["am"], ["pm"]):
        return hour, 0
    if before[-1:] == ["for"]:
        return None  # "a table for four in the evening"
    if after[:1] == ["tonight"] or before[-1:] == ["at"] or (
            after[:2] == ["in", "the"] and after[2:] and after[2] in _PARTS_OF_DAY):
        return hour, 0
    return None


def _hour(word: str) -> int | None:
    """The hour a word may name: 1-23 in digits, one to twelve in words."""
    if word.isdigit() and len(word) <= 2 and 0 < int(word) < 24:
        return int(word)
    return ONES.index(word) if word in ONES[1:13] else None


def _minutes_before(before: list[str]) -> int | None:
    """The minutes of "half past", "a quarter to", "twenty five past", "10 to"."""
    *tens, last, _ = ["", *before]
    if last in _QUARTERS:
        return _QUARTERS[last]
    if last.isdigit():
        minutes = int(last)
    elif last in ONES[1:]:
        minutes = ONES.index(last) + (20 + 10 * TENS.index(tens[-1])
                                      if tens[-1] in TENS[:1] else 0)
    elif last in TENS[:1]:
        minutes = 20
    else:
        return None
    return minutes if 0 < minutes <= 30 else None


def _minutes_after(after: list[str]) -> int | None:
    """Minutes said right after an hour: "30", "thirty", "forty five", "fifteen"."""
    if not after:
        return None
    if re.fullmatch(r"\d{2}", after[0]) and int(after[0]) < 60:
        return int(after[0])  # Whisper's "8 30"
    if after[0] in TENS[:4]:  # twenty to fifty
        extra = ONES.index(after[1]) if len(after) > 1 and after[1] in ONES[1:10] else 0
        return 20 + 10 * TENS.index(after[0]) + extra
    if after[0] in ONES[10:20]:  # "seven fifteen"
        return ONES.index(after[0])
    return None
