"""The bundled appointments playbook's tools (playbooks/tools/appointments.py): a taken slot
is a result that says its answer (the nearest free slots, and offers the one when only one is
free), a slot today that has begun cannot be booked, and a booking says its confirmation.
Today is pinned to Wednesday 2029-12-26, 14:10."""

from __future__ import annotations

import importlib.util
from datetime import date, datetime
from types import SimpleNamespace

import pytest

from tests.playbook.conftest import PLAYBOOKS

_spec = importlib.util.spec_from_file_location("appointments",
                                               PLAYBOOKS / "tools" / "appointments.py")
assert _spec is not None and _spec.loader is not None
appointments = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(appointments)


class _Today(date):
    @classmethod
    def today(cls) -> date:
        return cls(2029, 12, 26)


class _Now(datetime):
    @classmethod
    def now(cls, tz=None) -> datetime:  # noqa: ANN001 - datetime.now's own signature
        return cls(2029, 12, 26, 14, 10)


@pytest.fixture
def ctx(tmp_path, monkeypatch) -> SimpleNamespace:
    monkeypatch.setattr(appointments, "Date", _Today)
    monkeypatch.setattr(appointments, "datetime", _Now)
    return SimpleNamespace(options={"db_path": str(tmp_path / "calendar.sqlite")})


def test_a_booking_confirms_and_a_taken_slot_offers_its_neighbours(ctx) -> None:
    booked = appointments.book_appointment("2029-12-31", "10:00", "Tom Hardy", ctx=ctx)
    assert booked["booked"] is True and booked["tell_caller"] == \
        "You're booked for Monday 31 December at 10 am, Tom Hardy. See you then!"
    taken = appointments.book_appointment("2029-12-31", "10:00", "Grace Hopper", ctx=ctx)
    assert taken["booked"] is False and taken["free_near"] == ["09:00", "09:30", "10:30"]
    assert taken["tell_caller"] == ("Sorry, Monday at 10 am is taken. I can offer 9 am, "
                                    "9:30 am or 10:30 am. Which would you like?")
    afternoon = appointments.book_appointment("2029-12-31", "14:30", "Ada Lovelace", ctx=ctx)
    assert "at 2:30 pm, Ada Lovelace" in afternoon["tell_caller"]


def test_a_slot_today_that_has_begun_is_refused(ctx) -> None:
    with pytest.raises(ValueError, match="has already begun"):
        appointments.book_appointment("2029-12-26", "14:00", "Tom Hardy", ctx=ctx)
    assert appointments.book_appointment("2029-12-26", "14:30", "Tom Hardy", ctx=ctx)["booked"]
    assert "14:00" not in appointments.list_free_slots("2029-12-26", ctx=ctx)["free"]


def test_a_taken_slot_with_one_free_near_it_offers_that_one(ctx) -> None:
    """One slot left: the answer offers it, and the result holds it (offer_from), so a plain
    yes books it; with several free (above) a yes could mean any, and none is offered."""
    for time in ("14:30", "15:00", "15:30", "16:00"):  # today: 14:30-16:30 have not begun
        assert appointments.book_appointment("2029-12-26", time, "Tom Hardy", ctx=ctx)["booked"]
    taken = appointments.book_appointment("2029-12-26", "16:00", "Grace Hopper", ctx=ctx)
    assert taken["offer"] == {"date": "2029-12-26", "time": "16:30"}
    assert taken["tell_caller"] == ("Sorry, Wednesday at 4 pm is taken. I can offer 4:30 pm. "
                                    "Would that suit you?")
    several = appointments.book_appointment("2029-12-31", "10:00", "Tom Hardy", ctx=ctx)
    assert several["booked"] and appointments.book_appointment(
        "2029-12-31", "10:00", "Grace Hopper", ctx=ctx)["offer"] == {}


def test_the_free_slots_are_said_with_their_day(ctx) -> None:
    """The list answers itself (answer_from): the first three, how many more, until when; one
    slot left is offered; a full day says so."""
    appointments.book_appointment("2029-12-31", "10:00", "Tom Hardy", ctx=ctx)
    monday = appointments.list_free_slots("2029-12-31", ctx=ctx)
    assert len(monday["free"]) == 15 and monday["offer"] == {}
    assert monday["tell_caller"] == ("On Monday 31 December I have 9 am, 9:30 am, 10:30 am "
                                     "and 12 more slots until 4:30 pm. Which time would you "
                                     "like?")
    for time in ("14:30", "15:00", "15:30"):  # today (14:10): 14:30-16:30 have not begun
        appointments.book_appointment("2029-12-26", time, "Tom Hardy", ctx=ctx)
    today = appointments.list_free_slots("2029-12-26", ctx=ctx)
    assert today["tell_caller"] == ("On Wednesday 26 December I have 4 pm or 4:30 pm free. "
                                    "Which would you like?") and today["offer"] == {}
    appointments.book_appointment("2029-12-26", "16:00", "Tom Hardy", ctx=ctx)
    last = appointments.list_free_slots("2029-12-26", ctx=ctx)
    assert last["offer"] == {"date": "2029-12-26", "time": "16:30"}
    assert last["tell_caller"] == \
        "On Wednesday 26 December I have 4:30 pm free. Which would you like?"
    appointments.book_appointment("2029-12-26", "16:30", "Tom Hardy", ctx=ctx)
    assert appointments.list_free_slots("2029-12-26", ctx=ctx)["tell_caller"] == \
        "Wednesday 26 December is fully booked. Which other day would suit you?"
