"""Slot filling, pure: a stage's ``collect`` gathers a tool's arguments from what the caller says.

A small model asked to call ``book_table`` in free conversation invents names and times, or never
calls it (0 bookings in 10 with the default model when we measured it). So the engine, not the
model, runs the conversation of such a stage. On each user turn:

1. **note**: one short request whose answer must be a JSON object (a structured-output
   ``response_format``: the local model's grammar, or the endpoint's own) holding the tool's
   arguments, each required and nullable, with the playbook's ``examples`` in the prompt: the
   model only reads the caller's last message (and the question it answers) and writes what it
   says, ``null`` for the rest. No tool listing: the prompt stays short and cached;
2. **check**: each value must validate against its own JSON Schema; an ``x-from-caller`` one must
   be made of the caller's words; a whole number must be in the caller's message itself (its
   digits or its English words: "Then half past eight" gives no party size of 4), a time its
   hour and minutes (digits or words, a 12- or 24-hour clock; no minutes said: on the hour),
   a text with other digits (a date) a number there (digits or an English number word), and
   another text a word of the message ("beard trim", not an example's "haircut"). A
   date the caller names by its day ("tomorrow", "on Monday", "the day after tomorrow") is
   worked out here from today's date, when the playbook gives it (``globals.today``): a small
   model writes a wrong date for "Monday" even with the week's dates in front of it. A
   caller who agrees ("Yes, that works.", "Sure.") takes the values a tool's spoken answer
   offered (``offer_from``: "Sorry, we're fully booked at 8 pm. I can offer 9 pm. Would that
   work?" with ``{time: "21:00"}``) for the details the caller's own words do not give; one
   who does not ("No, that's too late.") is asked for those details again. Never from the
   model's words: it offers times it has not checked. A value that fails is dropped, not
   stored: a model that fills a blank with a guess changes nothing;
3. **act**: when every required argument is known, the engine calls the tool itself (once per set
   of values: a call that failed is not repeated until the caller changes something, or says
   the same again to a tool that answers itself); otherwise
   the question of the first missing argument (``ask``) is spoken, when the turn gave new facts
   or the stage just began; otherwise the model answers, told what is known and what is missing.
   A tool the model calls then (a lookup) gets the details the caller gave, not the model's
   (``FactSheet.ground``).

This module builds the request and judges its answer; ``responder`` does the I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import date as Date
from typing import Any

from jsonschema import Draft202012Validator

from ..pipeline.readings import ONES, TENS
from .heard import WORDS, WRITTEN_DATE, day_named, digits_said, time_named, words_heard
from .schema import Collect, Tool
from .tools import FROM_CALLER, public_schema

__all__ = ["NOTE_NAME", "FactSheet", "declined", "sheets", "standing_offer",
           "takes_a_date", "takes_a_time", "talk_words"]

NOTE_NAME = "note_facts"
_NAMED = {2: "couple", 12: "dozen"}
_NUMBER_WORDS = frozenset([*ONES, *TENS, *_NAMED.values(),
                           *"hundred thousand half quarter noon midday midnight".split()])
_MONTHS = frozenset(Date(2000, month, 1).strftime(form).lower()  # as ``_date_said`` reads them
                   for month in range(1, 13) for form in ("%B", "%b"))
_FILLER = frozenset("the and for with you your our that this are was were has have had not "
                    "but".split())  # words a noted text shares with any message
_AGREE = frozenset("yes yeah yep yup sure ok okay fine great perfect good works alright "
                   "lovely deal".split())
_REFUSE = frozenset("no nope not don't doesn't won't can't cannot isn't rather instead "
                    "but".split())
_WORDS_OF_TALK = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")  # a time of day, H:MM or HH:MM
_ORDINAL_WORDS = frozenset(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
    "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth "
    "thirtieth".split())
_DAY_OF_MONTH = re.compile(r"\b\d{1,2}(st|nd|rd|th)\b|\bthe \d{1,2}\b")  # "the 7th", "the 7"
_MINUTE_WORDS = [({"half"}, {30}), ({"thirty"}, {30}), ({"quarter"}, {15, 45}),
                 ({"fifteen"}, {15}), ({"forty"}, {40, 45}), ({"fifty"}, {50}),
                 ({"clock"}, {0})]


@dataclass(frozen=True)
class FactSheet:
    """The arguments one stage collects for ``collect.tool``."""

    collect: Collect
    tool_name: str
    tool: Tool

    @property
    def properties(self) -> dict[str, Any]:
        return dict(self.tool.parameters.get("properties") or {})

    @property
    def required(self) -> list[str]:
        """Required arguments in asking order: ``ask``'s order first, then the schema's."""
        needed = list(self.tool.parameters.get("required") or [])
        return [n for n in self.collect.ask if n in needed] + \
            [n for n in needed if n not in self.collect.ask]

    def missing(self, facts: dict[str, Any]) -> list[str]:
        return [name for name in self.required if name not in facts]

    def question(self, facts: dict[str, Any]) -> str | None:
        """The question for the first missing argument (None: no ``ask`` text for it)."""
        missing = self.missing(facts)
        return self.collect.ask.get(missing[0]) if missing else None

    def question_before_note(self, facts: dict[str, Any], said: str) -> str | None:
        """The question for the first missing argument when ``said`` cannot give it
        (``unsayable``), so it stays the first missing whatever the note finds: "Hello, I'd
        like to book a check-up" is asked for a day before the note is read. None
        otherwise."""
        missing = self.missing(facts)
        if not missing or missing[0] not in self.unsayable(said):
            return None
        return self.collect.ask.get(missing[0])

    # -- the note request -----------------------------------------------------------------
    def note_format(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The answer's JSON Schema (OpenAI's ``response_format``): every argument required and
        nullable, so the model must decide each one; a ``given`` one only its value: null for
        one the session's data holds (the 1.5B model wrote "other" over the category a ticket
        stage was entered with) or one the message cannot give, the day named for a date
        (``given``). (The prompt stays the same, so its cache does; the embedded model reads
        such a value, not writes it.)"""
        props: dict[str, Any] = {}
        for name, schema in self.properties.items():
            if given is not None and name in given:
                value = given[name]
                props[name] = {"type": "null"} if value is None else {"enum": [value]}
                continue
            schema = public_schema(schema) if isinstance(schema, dict) else {}
            # anyOf, not a type list: llama.cpp's grammar keeps a pattern or a range only so
            props[name] = {"anyOf": [schema, {"type": "null"}]}
        return {"type": "json_schema", "json_schema": {
            "name": NOTE_NAME, "schema": {"type": "object", "properties": props,
                                          "required": list(props),
                                          "additionalProperties": False}}}

    def unsayable(self, said: str) -> frozenset[str]:
        """The details ``said`` cannot give: whatever the model noted for them, step 2 would
        drop it. A number, a time or a date needs a number said ("Hello, I'd like a table"
        gives no party size, time or date); a date also needs a day named ("Monday",
        "tomorrow"), a month, a day of the month ("the 12th", "the twelfth") or a written date
        ("for two at 7.30" and "Half past 10" give none). The note's format allows them only
        null, so the model writes none of them: the 1.5B model wrote today's date for "Hello"
        (10 tokens, ~0.8 s on 2 cores), and the date offered for "Half past 10"."""
        heard = set(WORDS.findall(said.lower()))
        no_number = not _says_a_number(said, heard)
        no_date = no_number or not _names_a_date(said) and day_named(said, Date.today()) is None
        return frozenset(name for name, schema in self.properties.items()
                         if isinstance(schema, dict) and (no_number and _needs_a_number(schema)
                                                          or no_date and takes_a_date(schema)))

    def given(self, said: str, today: Date | None = None) -> dict[str, Any]:
        """The details whose value ``said`` settles before the model notes it: None for each
        one it cannot give (``unsayable``); for a date, the day it names ("On Monday at
        ten", with ``today``) when it names no date of the month: ``accept`` would put that
        day in place of any date noted but a later same weekday that the caller's own date
        words give, and there are none. A date the model writes is ~12 tokens, ~0.9 s of a
        turn on 2 cores (the appointments playbook's "On Monday at ten in the morning,
        please.": 3.0-3.8 s). For an HH:MM time, the time it names with its half of the day
        (``heard.time_named``: "ten in the morning", not "at ten"): ~7 tokens more. For a
        text of digits (a pattern that takes them, not letters: an account number), the one
        run of digits said that fits it ("8 7 6 5 4 3 2 1"): one step a digit."""
        out: dict[str, Any] = dict.fromkeys(self.unsayable(said))
        day = day_named(said, today) if today is not None else None
        at = time_named(said)
        runs = digits_said(said)
        for name, schema in self.properties.items():
            if name in out or not isinstance(schema, dict):
                continue
            if day is not None and not _names_a_date(said) and takes_a_date(schema):
                out[name] = day.isoformat()
            elif at is not None and takes_a_time(schema) and \
                    _valid(clock := f"{at[0]:02d}:{at[1]:02d}", schema):
                out[name] = clock
            elif len(fits := {run for run in runs if _takes_digits(schema, run)}) == 1:
                out[name] = fits.pop()
        return out

    def note_messages(self, asked: str | None, said: str) -> list[dict[str, Any]]:
        """System prompt (fixed per stage, so the model's prompt cache keeps it), the agent's
        last question, the caller's message."""
        lines = [f"You write down the details a caller gives for {self._purpose()}, from the "
                 "caller's last message only. Write null for every detail the caller did not "
                 "say in that message; never guess.", "Details:"]
        for name, schema in self.properties.items():
            about = schema.get("description", "") if isinstance(schema, dict) else ""
            lines.append(f"- {name}" + (f": {about}" if about else ""))
        if self.collect.examples:
            lines.append("Examples:")
            for example in self.collect.examples:
                full = {name: example.facts.get(name) for name in self.properties}
                lines.append(f'Caller: "{example.said}" -> {json.dumps(full)}')
        messages: list[dict[str, Any]] = [{"role": "system", "content": "\n".join(lines)}]
        if asked:
            messages.append({"role": "assistant", "content": asked})
        messages.append({"role": "user", "content": said})
        return messages

    def _purpose(self) -> str:
        about = self.tool.description.strip().rstrip(".")
        return f"{self.tool_name} ({about})" if about else self.tool_name

    # -- judging the answer -----------------------------------------------------------------
    def accept(self, arguments: str | dict[str, Any], said: str,
               offer: dict[str, Any] | None = None, today: Date | None = None,
               ) -> dict[str, Any]:
        """The noted values that hold up (see the module docstring, step 2); ``offer``: the
        values the agent's last message offered (a tool's), which a yes takes; ``today``
        resolves the days the caller names."""
        heard = words_heard(said)
        out = self._checked(arguments, said, heard)
        day = day_named(said, today) if today is not None else None
        for name, schema in self.properties.items():
            if not isinstance(schema, dict) or not takes_a_date(schema):
                continue
            if day is not None and not _same_weekday_said(out.get(name), day, said, heard):
                out[name] = day.isoformat()
            elif day is None and name in out and not (_names_a_date(said) and
                                                      _date_said(out[name], heard)):
                del out[name]  # "Half past ten" noted as today's date: a time's number
        if offer and _agrees(said):  # the caller's own words first: "Yes, at half past nine"
            out = {**self._checked(offer, "", set(), checked=False), **out}
        return out

    def _checked(self, arguments: str | dict[str, Any], said: str, heard: set[str], *,
                 checked: bool = True) -> dict[str, Any]:
        """The values that validate against their schemas, whose ``x-from-caller`` texts are
        made of the caller's words (``heard``), and, when ``checked``, that those words back
        (``_backed``)."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError:
                return {}
        if not isinstance(arguments, dict):
            return {}
        out = {}
        for name, schema in self.properties.items():
            value = arguments.get(name)
            if value is None or value == "" or not isinstance(schema, dict):
                continue
            if not _valid(value, schema):
                continue
            if schema.get(FROM_CALLER) and \
                    not set(WORDS.findall(str(value).lower())) <= heard:
                continue  # never offered: a name is the caller's
            if checked and not _backed(value, said, heard):
                continue
            out[name] = value
        return out

    def ground(self, tool: Tool, arguments: str, facts: dict[str, Any], said: str,
               today: Date | None = None) -> str:
        """The model's ``arguments`` for a call of ``tool`` in this stage, with each detail
        this sheet collects too (same name, same type) taken from the caller: the value the
        caller's message backs (step 2; a day named is worked out), else the noted fact, else
        the model's. The 1.5B, told "Have passed in, please." after a taken slot on Monday,
        looked up today's free slots instead."""
        try:
            args = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            return arguments
        if not isinstance(args, dict):
            return arguments
        theirs = tool.parameters.get("properties") or {}
        shared = {k: v for k, v in args.items() if k in self.properties and
                  _same_type(theirs.get(k), self.properties[k])}
        backed = self.accept(shared, said, None, today)
        grounded = {k: backed.get(k, facts.get(k, v)) for k, v in shared.items()}
        return json.dumps({**args, **grounded}) if grounded != shared else arguments

    def prompt_lines(self, facts: dict[str, Any]) -> str:
        """What the answering model is told in such a stage when the engine does not act."""
        missing = self.missing(facts)
        text = "Details the caller gave: " + json.dumps(facts, ensure_ascii=False, default=str)
        if missing:
            text += (". Still needed: " + ", ".join(missing) + ". Answer the caller, then ask "
                     "for " + missing[0].replace("_", " ") + "; never make up a detail.")
        return text


def _same_type(schema: Any, ours: Any) -> bool:
    return isinstance(schema, dict) and isinstance(ours, dict) and \
        schema.get("type") == ours.get("type")


def _numeric(value: Any) -> bool:
    """A number, or a text with digits in it (a time, a date, a phone number)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) or (isinstance(value, str) and
                                              any(ch.isdigit() for ch in value))


def _needs_a_number(schema: dict[str, Any]) -> bool:
    """Every value ``schema`` allows is a number or a text with digits (a time, a date): a
    pattern with a digit that is not optional, and no alternatives."""
    schema = public_schema(schema)
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return True
    if kind != "string":
        return False
    if schema.get("format") in ("date", "time", "date-time"):
        return True
    pattern = schema.get("pattern")
    if not isinstance(pattern, str) or "|" in pattern:
        return False
    required = re.sub(r"(\\d|\[[^\]]*\]|\([^)]*\))(\?|\*|\{0(,\d*)?\})", "", pattern)
    return re.search(r"\\d|\[0-9\]", required) is not None


def _backed(value: Any, said: str, heard: set[str]) -> bool:
    """The caller's words back a noted value: a whole number is said, a time's hour and
    minutes are, another text with digits comes with a number, another text shares a word
    with them ("a beard trim" for "beard trim"; "my hair cut" for "haircut"): a note that
    copies an example's "haircut" for "Yes, that works." changes nothing."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _says_integer(value, said, heard)
    if isinstance(value, str) and (clock := _CLOCK.match(value)):
        said = WRITTEN_DATE.sub(" ", said)  # "2029-12-31 at 10:00": not a time 20:29
        return _says_hour(int(clock.group(1)), said, heard) and \
            _says_minutes(int(clock.group(2)), said, heard)
    if _numeric(value):
        return _says_a_number(said, heard)
    if not isinstance(value, str):
        return True
    words = WORDS.findall(value.lower())
    squashed = "".join(words)
    return bool({w for w in words if len(w) > 2} & heard - _FILLER) or (
        len(squashed) > 2 and squashed in "".join(WORDS.findall(said.lower())))


def _names_a_date(said: str) -> bool:
    """``said`` names a date of the month, not only a day: a month, an ordinal ("the 7th",
    "the seventh"), "the" and a number ("Monday the 7"), or a written date."""
    text = said.lower()
    return bool(set(WORDS.findall(text)) & (_MONTHS | _ORDINAL_WORDS)
                or _DAY_OF_MONTH.search(text) or WRITTEN_DATE.search(text))


def _same_weekday_said(noted: Any, day: Date, said: str, heard: set[str]) -> bool:
    """A date the model noted that the caller's numbers back and that falls on the weekday
    named: "Monday the 7th of December" is that Monday, not the next one."""
    found = _as_date(noted)
    return found is not None and found.weekday() == day.weekday() and found >= day and \
        _says_a_number(said, heard)


def _date_said(noted: Any, heard: set[str]) -> bool:
    """The caller's words name the noted date's month, or its day of the month in digits
    ("the 12th of March", "March twelfth", "on the 3rd", "2030-01-08"); a number said for
    another detail is not a date."""
    found = _as_date(noted)
    return found is not None and bool(
        {found.strftime("%B").lower(), found.strftime("%b").lower(), str(found.day),
         f"{found.day:02d}", f"{found.day}{_ordinal(found.day)}"} & heard)


def _as_date(value: Any) -> Date | None:
    try:
        return Date.fromisoformat(str(value))
    except ValueError:
        return None


def _ordinal(n: int) -> str:
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def standing_offer(offer: dict[str, Any], offer_said: str, asked: str | None
                   ) -> dict[str, Any] | None:
    """``offer``, the values a tool's answer ``offer_said`` offered, while that answer is in
    the agent's last message as the caller heard it (``asked``): a later answer, or a
    barge-in that cut it off, ends it."""
    if not offer or not asked:
        return None
    return offer if " ".join(offer_said.split()) in " ".join(asked.split()) else None


def declined(offer: dict[str, Any] | None, facts: dict[str, Any], said: str,
             fixed: Collection[str] = ()) -> list[str]:
    """The details a caller who does not take a standing ``offer`` ("No, that's too late.")
    leaves open: those it offered another value for than the one that failed (asked again);
    never a ``fixed`` one (the session's data, which no offer changes either)."""
    if not offer or _agrees(said):
        return []
    return [name for name, value in offer.items()
            if name in facts and facts[name] != value and name not in fixed]


def takes_a_date(schema: dict[str, Any]) -> bool:
    """A YYYY-MM-DD date: ``format: date``, or a pattern that a date matches."""
    pattern = schema.get("pattern")
    return schema.get("format") == "date" or (
        isinstance(pattern, str) and re.search(pattern, "2030-01-07") is not None and
        re.search(pattern, "07:30") is None)


def takes_a_time(schema: dict[str, Any]) -> bool:
    """An HH:MM time of day: a pattern that a time matches and a date does not."""
    pattern = schema.get("pattern")
    return isinstance(pattern, str) and re.search(pattern, "07:30") is not None and \
        re.search(pattern, "2030-01-07") is None


def _takes_digits(schema: dict[str, Any], digits: str) -> bool:
    """A text of ``digits``' kind: its pattern takes them and not letters in their place."""
    return isinstance(schema.get("pattern"), str) and _valid(digits, schema) and \
        not _valid(re.sub(r"\d", "a", digits), schema)


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    return next(Draft202012Validator(public_schema(schema)).iter_errors(value), None) is None


def _agrees(said: str) -> bool:
    """A yes without a but: "Yes, that works.", "Sure." ("No, that's too late." does not)."""
    words = talk_words(said)
    return bool(words & _AGREE) and not words & _REFUSE


def talk_words(said: str) -> set[str]:
    """The words of a reply, lower-cased, "don't" as one ("I don\u2019t" too)."""
    return set(_WORDS_OF_TALK.findall(said.lower().replace("\u2019", "'")))


def _says_a_number(said: str, heard: set[str]) -> bool:
    return any(ch.isdigit() for ch in said) or bool(heard & _NUMBER_WORDS)


def _says_hour(hour: int, said: str, heard: set[str]) -> bool:
    """The caller named the hour of a noted ``H:MM`` time, on a 12- or 24-hour clock, in
    digits or words ("half past 8" and "830" for 20:30; "quarter to nine" for 8:45; "noon"):
    the 0.5B model noted 19:00, an example's time, for "half past 8 in the evening"."""
    twelve = hour % 12 or 12
    wanted = {twelve, twelve % 12 + 1} if "to" in heard else {twelve}
    named: set[int] = set()
    for n in map(int, re.findall(r"\d+", said)):
        if n <= 24:
            named.add(n % 12 or 12)
        elif together := _run_together(n):  # "630": Whisper's 6:30
            named.add(together[0] % 12 or 12)
    named |= {ONES.index(w) % 12 or 12 for w in heard if w in ONES}
    named |= {12 for w in ("noon", "midday", "midnight") if w in heard}
    return bool(wanted & named)


def _says_minutes(minutes: int, said: str, heard: set[str]) -> bool:
    """The minutes of a noted time agree with the caller's: minutes said ("7.30", "630",
    "half", "quarter", "thirty"; "ten past", "twenty") must include them, and a time said
    without minutes is on the hour (the 0.5B model noted 19:00 for "7.30 in the evening")."""
    said_minutes = {hhmm[1] for n in map(int, re.findall(r"\d+", said))
                    if (hhmm := _run_together(n))}
    said_minutes |= {int(n) for n in re.findall(r"\b\d{1,2}[:. ](\d{2})\b", said)
                     if int(n) < 60}  # "7.30", "8:30", Whisper's "8 30"
    for words, at in _MINUTE_WORDS:
        if words <= heard:
            said_minutes |= at
    if not minutes:
        return not said_minutes - {0}
    maybe = {20} if "twenty" in heard else set()  # "seven twenty"; or twenty people
    if heard & {"past", "to"}:  # "ten past eight", "twenty five to nine"
        small = {int(n) for n in re.findall(r"\d+", said) if int(n) <= 30}
        small |= {ONES.index(w) for w in heard if w in ONES}
        small |= {20 + n for n in small if n < 10} if "twenty" in heard else set()
        maybe |= small | {60 - n for n in small if n}
    return minutes in said_minutes | maybe


def _run_together(n: int) -> tuple[int, int] | None:
    """(hour, minutes) of a time said as one number, as Whisper writes it ("630", "1930")."""
    return divmod(n, 100) if 100 <= n <= 2400 and n % 100 < 60 else None


def _says_integer(n: int, said: str, heard: set[str]) -> bool:
    """``n`` in digits or in English words ("four", "twenty five", "a couple", "a dozen")."""
    if str(n) in re.findall(r"\d+", said) or _NAMED.get(n) in heard:
        return True
    if 0 <= n < 20:
        return ONES[n] in heard
    if 20 <= n < 100:
        return {TENS[n // 10 - 2], *([ONES[n % 10]] if n % 10 else [])} <= heard
    return False


def sheets(stages: dict[str, Any], tools: dict[str, Tool]) -> dict[str, FactSheet]:
    """A ``FactSheet`` per stage that collects (the loader checked the names)."""
    return {name: FactSheet(stage.collect, stage.collect.tool, tools[stage.collect.tool])
            for name, stage in stages.items()
            if stage.collect is not None and stage.collect.tool in tools}
