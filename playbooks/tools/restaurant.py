"""Tools of ``restaurant.yaml``: a small in-memory table plan (deterministic for tests)."""

from __future__ import annotations

import hashlib

HOURS = {"monday": None, "tuesday": ("12:00", "22:00"), "wednesday": ("12:00", "22:00"),
         "thursday": ("12:00", "22:00"), "friday": ("12:00", "23:00"),
         "saturday": ("12:00", "23:00"), "sunday": ("12:00", "21:00")}
TABLES = {2: 6, 4: 4, 6: 2, 12: 1}  # seats -> tables per slot
FULL_SLOTS = {"20:00"}  # always busy (so scenarios can exercise "no table")


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def opening_hours(day: str = "today") -> dict:
    day = day.strip().lower()
    if day not in HOURS:
        return {"hours": {d: (f"{h[0]}-{h[1]}" if h else "closed") for d, h in HOURS.items()}}
    hours = HOURS[day]
    return {"day": day, "open": hours is not None,
            "hours": f"{hours[0]}-{hours[1]}" if hours else "closed"}


def check_availability(time: str, party_size: int) -> dict:
    minutes = _minutes(time)
    if not 12 * 60 <= minutes <= 22 * 60:
        return {"available": False, "reason": "we serve between 12:00 and 22:00"}
    if party_size > max(TABLES):
        return {"available": False, "reason": f"our largest table seats {max(TABLES)}"}
    if time in FULL_SLOTS:
        later = f"{(minutes + 60) // 60:02d}:{minutes % 60:02d}"
        return {"available": False, "reason": "fully booked", "alternative": later}
    seats = min(s for s in TABLES if s >= party_size)
    return {"available": True, "time": time, "table_seats": seats}


def book_table(name: str, time: str, party_size: int) -> dict:
    free = check_availability(time, party_size)
    if not free["available"]:
        raise ValueError(f"no table at {time}: {free['reason']}")
    booking = hashlib.sha1(f"{name}|{time}|{party_size}".encode()).hexdigest()[:6].upper()
    return {"booked": True, "booking_id": f"L-{booking}", "name": name, "time": time,
            "party_size": party_size}
