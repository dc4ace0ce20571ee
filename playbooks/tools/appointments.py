"""Tools of ``appointments.yaml``: a calendar kept in SQLite.

The database file is ``ctx.options["db_path"]``; a relative path is placed where the server
keeps its files (``VOICE_SERVER_DATA_DIR``, else ``$XDG_DATA_HOME/voice-server``,
else ``~/.local/share/voice-server``: ``voice_server.config.data_dir_from_env``). Opening
hours are 09:00-17:00 in 30-minute slots. Each call opens its own connection (handlers run in
worker threads).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import date as Date
from datetime import datetime
from pathlib import Path

from voice_server.config import data_dir_from_env
from voice_server.playbook import spoken_date, spoken_time

SLOTS = [f"{h:02d}:{m:02d}" for h in range(9, 17) for m in (0, 30)]
SCHEMA = """
CREATE TABLE IF NOT EXISTS appointments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    day TEXT NOT NULL, time TEXT NOT NULL, name TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
    cancelled INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS one_per_slot ON appointments(day, time) WHERE cancelled = 0;
"""


def _connect(ctx) -> sqlite3.Connection:
    path = Path(ctx.options.get("db_path", "appointments.sqlite"))
    if not path.is_absolute():
        path = data_dir_from_env().expanduser() / path
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=5)
    conn.executescript(SCHEMA)
    return conn


def _check_day(day: str) -> str:
    parsed = Date.fromisoformat(day)
    if parsed < Date.today():
        raise ValueError(f"{day} is in the past; today is {Date.today().isoformat()}")
    if parsed.weekday() >= 5:
        raise ValueError(f"{day} is a {parsed:%A}; the clinic opens Monday to Friday")
    return parsed.isoformat()


def _free(conn: sqlite3.Connection, day: str) -> list[str]:
    taken = {row[0] for row in conn.execute(
        "SELECT time FROM appointments WHERE day = ? AND cancelled = 0", (day,))}
    return [s for s in SLOTS if s not in taken | _begun(day)]


def _begun(day: str) -> set[str]:
    """The slots of ``day`` that have already begun (today's, up to now)."""
    if day != Date.today().isoformat():
        return set()
    return {s for s in SLOTS if s <= datetime.now().strftime("%H:%M")}


def list_free_slots(date: str, *, ctx) -> dict:
    day = _check_day(date)
    with closing(_connect(ctx)) as conn:
        free = _free(conn, day)
    on = spoken_date(day)
    # said as it is (answer_from): the 1.5B model, given the list, said "16 free slots on
    # Friday" of Monday's 15
    tell = (f"{on} is fully booked. Which other day would suit you?" if not free else
            f"On {on} I have {_or(free)} free. Which would you like?" if len(free) <= 3 else
            f"On {on} I have {', '.join(map(spoken_time, free[:3]))} and {len(free) - 3} "
            f"more slots until {spoken_time(free[-1])}. Which time would you like?")
    return {"date": day, "free": free, "tell_caller": tell,
            # one slot left: a plain yes books it (offer_from)
            "offer": {"date": day, "time": free[0]} if len(free) == 1 else {}}


def book_appointment(date: str, time: str, name: str, reason: str = "", *, ctx) -> dict:
    day = _check_day(date)
    if time not in SLOTS:
        raise ValueError(f"{time} is not a slot; slots run 09:00-16:30 every 30 minutes")
    if time in _begun(day):
        raise ValueError(f"{time} today has already begun; the next slots today are later")
    when = Date.fromisoformat(day)
    with closing(_connect(ctx)) as conn:
        try:
            with conn:
                cur = conn.execute(
                    "INSERT INTO appointments (day, time, name, reason) VALUES (?, ?, ?, ?)",
                    (day, time, name.strip(), reason.strip()))
        except sqlite3.IntegrityError:
            at = SLOTS.index(time)  # slots are evenly spaced: their distance is the index's
            near = sorted(sorted(_free(conn, day), key=lambda s: abs(SLOTS.index(s) - at))[:3])
            # said as it is (answer_from): the 1.5B model, told the error, spoke of "the
            # caller" ("The caller was unable to book...")
            offer = (f"I can offer {_or(near)}. Which would you like?" if len(near) > 1 else
                     f"I can offer {_or(near)}. Would that suit you?" if near else
                     "That day is full. Which other day would suit you?")
            return {"booked": False, "date": day, "time": time, "free_near": near,
                    # one time offered: a plain yes books it (offer_from)
                    "offer": {"date": day, "time": near[0]} if len(near) == 1 else {},
                    "tell_caller": f"Sorry, {when:%A} at {spoken_time(time)} is taken. {offer}"}
    return {"booked": True, "appointment_id": cur.lastrowid, "date": day, "time": time,
            "name": name.strip(),
            "tell_caller": f"You're booked for {_when(day, time)}, {name.strip()}. "
                           "See you then!"}


def _or(times: list[str]) -> str:
    said = [spoken_time(t) for t in times]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


def find_appointments(name: str, *, ctx) -> dict:
    with closing(_connect(ctx)) as conn:
        rows = conn.execute(
            "SELECT id, day, time, reason FROM appointments WHERE lower(name) = lower(?) "
            "AND cancelled = 0 ORDER BY day, time", (name.strip(),)).fetchall()
    return {"name": name, "appointments": [
        {"appointment_id": r[0], "date": r[1], "time": r[2], "reason": r[3]} for r in rows]}


def cancel_appointment(name: str, date: str | None = None, time: str | None = None, *,
                       ctx) -> dict:
    """Cancel the caller's appointment: the one on ``date`` (at ``time``) when they said which,
    else none yet: their appointments are said and, when there is one, offered (offer_from),
    so a plain yes cancels it. (A stage that forced the model to look the name up first made
    one up, "John Doe", before the caller had said it.)"""
    who = name.strip()
    with closing(_connect(ctx)) as conn:
        rows = conn.execute(
            "SELECT id, day, time FROM appointments WHERE lower(name) = lower(?) "
            "AND cancelled = 0 AND day >= ? ORDER BY day, time",
            (who, Date.today().isoformat())).fetchall()
        chosen = [r for r in rows if r[1] == date and time in (None, r[2])] if date else []
        if len(chosen) == 1:
            key, day, at = chosen[0]
            with conn:
                conn.execute("UPDATE appointments SET cancelled = 1 WHERE id = ?", (key,))
            return {"cancelled": True, "appointment_id": key, "date": day, "time": at,
                    "tell_caller": f"Done: your appointment on {_when(day, at)} is cancelled, "
                                   f"{who}."}
    if not rows:
        return {"cancelled": False, "appointments": [], "tell_caller": "I find no upcoming "
                f"appointment under {who}. Under which name was it booked?"}
    listed = [_when(day, at) for _, day, at in rows[:3]]
    found = (f"you have an appointment on {listed[0]}" if len(rows) == 1 else
             f"you have appointments on {', '.join(listed[:-1])} and {listed[-1]}")
    missed = f"I find none on {_when(date, time)}, but " if date else ""
    ask = "Shall I cancel it?" if len(rows) == 1 else "Which one shall I cancel?"
    tell = f"{missed}{who}, {found}. {ask}"
    return {"cancelled": False,
            "appointments": [{"date": day, "time": at} for _, day, at in rows],
            "offer": {"date": rows[0][1], "time": rows[0][2]} if len(rows) == 1 else {},
            "tell_caller": tell[0].upper() + tell[1:]}


def _when(day: str, time: str | None) -> str:
    """How a day (and time) is said: "Tuesday 1 December at 10 am"."""
    return spoken_date(day) + (f" at {spoken_time(time)}" if time else "")
