"""Tools of ``restaurant.yaml``: a small in-memory table plan (deterministic for tests)."""

from __future__ import annotations

import hashlib
from datetime import date as Date

from voice_server.playbook import spoken_day, spoken_time

HOURS = {"monday": None, "tuesday": ("12:00", "22:00"), "wednesday": ("12:00", "22:00"),
         "thursday": ("12:00", "22:00"), "friday": ("12:00", "23:00"),
         "saturday": ("12:00", "23:00"), "sunday": ("12:00", "21:00")}
TABLES = {2: 6, 4: 4, 6: 2, 12: 1}  # seats -> tables per slot
FULL_SLOTS = {"20:00"}  # always busy (so scenarios can exercise "no table")


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _serving(minutes: int) -> bool:
    return 12 * 60 <= minutes <= 22 * 60


def opening_hours(day: str = "today") -> dict:
    day = day.strip().lower()
    if day not in HOURS:
        return {"hours": {d: (f"{h[0]}-{h[1]}" if h else "closed") for d, h in HOURS.items()}}
    hours = HOURS[day]
    return {"day": day, "open": hours is not None,
            "hours": f"{hours[0]}-{hours[1]}" if hours else "closed"}


def check_availability(time: str, party_size: int) -> dict:
    minutes = _minutes(time)
    if not _serving(minutes):
        closed = {"available": False, "reason": "we serve between 12:00 and 22:00"}
        if minutes < 12 * 60 and _serving(minutes + 12 * 60):  # "nine" heard as 09:00
            closed["alternative"] = _hhmm(minutes + 12 * 60)
        return closed
    if party_size > max(TABLES):
        return {"available": False, "reason": f"our largest table seats {max(TABLES)}"}
    if time in FULL_SLOTS:
        return {"available": False, "reason": "fully booked", "alternative": _hhmm(minutes + 60)}
    seats = min(s for s in TABLES if s >= party_size)
    return {"available": True, "time": time, "table_seats": seats}


def book_table(name: str, time: str, party_size: int, date: str | None = None) -> dict:
    """A table at ``time`` on ``date`` (YYYY-MM-DD; today when the caller named no day)."""
    free = check_availability(time, party_size)
    if not free["available"]:
        return {"booked": False, "reason": free["reason"], **_instead(time, free)}
    day = Date.fromisoformat(date) if date else Date.today()
    if day < Date.today():
        return {"booked": False, "reason": "that day is past",
                "tell_caller": "Sorry, that day has passed. Which day would you like?"}
    booking = hashlib.sha1(f"{name}|{day}|{time}|{party_size}".encode()).hexdigest()[:6].upper()
    # the day is said when the caller named one: "tomorrow", "on Friday 4 December"
    when = "" if not date else f" {spoken_day(day, Date.today())}"
    return {"booked": True, "booking_id": f"L-{booking}", "name": name, "date": day.isoformat(),
            "time": time, "party_size": party_size,
            # the answer, said as it is (answer_from): the model confirmed in the caller's
            # voice at times ("I'll be there at 21:00")
            "tell_caller": f"Your table for {party_size}{when} at {spoken_time(time)} is booked "
                           f"under {name}. See you then!"}


def _instead(time: str, free: dict) -> dict:
    """What the caller is told, said as it is (answer_from), and the time it offers
    (offer_from), which a plain yes then books."""
    if free["reason"] == "fully booked":
        why = f"Sorry, we're fully booked at {spoken_time(time)}."
    elif "serve" in free["reason"]:
        why = "Sorry, we serve from noon to 10 pm."
    else:
        why = f"Sorry, {free['reason']}."
    if "alternative" not in free:
        return {"tell_caller": f"{why} What would you like instead?"}
    offered = free["alternative"]
    return {"offer": {"time": offered},
            "tell_caller": f"{why} I can offer {spoken_time(offered)}. Would that work?"}
