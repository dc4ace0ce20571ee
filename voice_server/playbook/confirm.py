"""Reading a ``collect`` stage's details back before its tool is called (``collect.confirm``).

Whisper tiny.en hears "Laura Chen" as "Lord Chen" now and then, and a booking made on what was
heard is wrong without anyone knowing. With ``confirm``, once every required detail is known
the engine says them back ("That's a table for 6 at 8:30 pm under Lord Chen. Shall I book
it?") and calls the tool only on a plain yes. A caller who gives another value ("No, it's
Laura Chen.") hears the new details read back; one who says no without one is asked what to
change, and one who says a text again that is heard as before ("No, the name is Lord Chen.")
is asked to spell it ("Laura, L-A-U-R-A, Chen, C-H-E-N.": ``heard.words_heard``). A yes
said over the read-back before every detail was heard hears it again (``heard_whole``). The
details are read back once per stage: after the yes, a value the tool's own answer
offered and the caller took, or one the caller changes, goes to the tool at once (its answer
says them: "Your table for 6 at 9 pm is booked under Laura Chen.").

Pure: ``responder`` does the I/O.
"""

from __future__ import annotations

import re
from datetime import date as Date
from typing import Any

from .collect import FactSheet, takes_a_date, takes_a_time, talk_words
from .schema import READ_BACK_PLACE
from .tools import spoken_day, spoken_time

__all__ = ["confirms", "heard_whole", "not_yet", "read_back", "refuses"]

_YES = frozenset("yes yeah yep yup sure ok okay fine great perfect good lovely correct right "
                 "exactly ahead absolutely definitely indeed".split())
_NO = frozenset("no nope nah wrong incorrect not isn't don't mistake change".split())
_BUT = frozenset("but rather instead wait hold actually".split())  # a yes that is not one


def read_back(sheet: FactSheet, facts: dict[str, Any], today: Date | None) -> str:
    """``confirm.say`` with each ``{argument}`` as a caller should hear it."""
    assert sheet.collect.confirm is not None
    values = _spoken_values(sheet, facts, today)
    text = READ_BACK_PLACE.sub(lambda m: values.get(m[1], ""), sheet.collect.confirm.say)
    return re.sub(r"\s+([,.?!])", r"\1", " ".join(text.split()))


def heard_whole(sheet: FactSheet, facts: dict[str, Any], today: Date | None,
                heard: str) -> bool:
    """Every detail of the read-back is in ``heard``, what the caller heard of the agent's
    last words: a yes said over it before a detail was spoken is no yes to that detail."""
    return all(value in heard for value in _spoken_values(sheet, facts, today).values())


def _spoken_values(sheet: FactSheet, facts: dict[str, Any], today: Date | None
                   ) -> dict[str, str]:
    assert sheet.collect.confirm is not None
    out = {}
    for name in READ_BACK_PLACE.findall(sheet.collect.confirm.say):
        schema = sheet.properties.get(name)
        if facts.get(name) is not None:
            out[name] = _spoken(facts[name], schema if isinstance(schema, dict) else {}, today)
    return out


def not_yet(sheet: FactSheet, noted: dict[str, Any], said: str) -> str | None:
    """The engine's answer to a reply to the read-back that is no yes and changes nothing
    (None: the model's). ``noted``: the details the reply gave again, heard as before. A
    text among them (a name; not a time or a number): to spell it; else, to a no, what to
    change."""
    confirm = sheet.collect.confirm
    assert confirm is not None
    for name in noted:
        schema = sheet.properties.get(name)
        if isinstance(schema, dict) and schema.get("type") == "string" and not (
                {"pattern", "format", "enum"} & set(schema)):
            return confirm.spell.replace("{argument}", name.replace("_", " "))
    return confirm.change if refuses(said) else None


def confirms(said: str) -> bool:
    """A plain yes: "Yes, please book it.", "That's right.", "Go ahead." (not "Yes, but ...")."""
    words = talk_words(said)
    return bool(words & _YES) and not words & (_NO | _BUT)


def refuses(said: str) -> bool:
    """A no: "No.", "That's wrong.", "Not quite." (not "No problem, go ahead.")."""
    words = talk_words(said)
    return bool(words & _NO) and not words & _YES


def _spoken(value: Any, schema: dict[str, Any], today: Date | None) -> str:
    try:
        if takes_a_time(schema):
            return spoken_time(str(value))
        if takes_a_date(schema):
            return spoken_day(str(value), today)
    except ValueError:  # not the format its schema said: read as it is
        pass
    return str(value)
