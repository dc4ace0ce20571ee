"""The bundled restaurant playbook's tools (playbooks/tools/restaurant.py): a time outside the
kitchen's hours that is an evening time twelve hours on ("nine" written 09:00) comes back with
that time as the alternative, as a fully booked slot does, and the booking tool offers it."""

from __future__ import annotations

import importlib.util

from tests.playbook.conftest import PLAYBOOKS

_spec = importlib.util.spec_from_file_location("restaurant", PLAYBOOKS / "tools" / "restaurant.py")
assert _spec is not None and _spec.loader is not None
restaurant = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(restaurant)


def test_a_morning_time_the_kitchen_serves_in_the_evening_offers_the_evening() -> None:
    assert restaurant.check_availability("09:00", 4) == {
        "available": False, "reason": "we serve between 12:00 and 22:00", "alternative": "21:00"}
    assert restaurant.check_availability("08:30", 2)["alternative"] == "20:30"


def test_a_time_no_reading_makes_servable_has_no_alternative() -> None:
    assert "alternative" not in restaurant.check_availability("11:00", 2)  # 23:00: closed
    assert "alternative" not in restaurant.check_availability("23:00", 2)
    assert restaurant.check_availability("21:00", 2)["available"] is True


def test_booking_a_closed_or_full_time_says_so_and_offers_the_time_to_try() -> None:
    """The answer is said as it is (answer_from) and its time is the offer a yes books
    (offer_from); a time with nothing to offer asks for another."""
    assert restaurant.book_table("Anna Smith", "20:00", 4) == {
        "booked": False, "reason": "fully booked", "offer": {"time": "21:00"},
        "tell_caller": "Sorry, we're fully booked at 8 pm. I can offer 9 pm. Would that work?"}
    assert restaurant.book_table("Anna Smith", "09:00", 4)["tell_caller"] == (
        "Sorry, we serve from noon to 10 pm. I can offer 9 pm. Would that work?")
    closed = restaurant.book_table("Anna Smith", "23:30", 2)
    assert "offer" not in closed and closed["tell_caller"] == (
        "Sorry, we serve from noon to 10 pm. What would you like instead?")
    booked = restaurant.book_table("Anna Smith", "21:00", 4)
    assert booked["booked"] is True and booked["tell_caller"].startswith(
        "Your table for 4 at 9 pm is booked under Anna Smith.")


def test_a_day_the_caller_names_is_booked_and_said() -> None:
    """book_table had no day: "Tomorrow at half past seven" was booked without one and
    confirmed as if for tonight (a newcomer's trial). No day named: today, said as before."""
    from datetime import date, timedelta

    today = date.today()
    tomorrow = restaurant.book_table("Maria Lopez", "19:30", 4, (today + timedelta(1)).isoformat())
    assert tomorrow["booked"] is True and tomorrow["date"] == (today + timedelta(1)).isoformat()
    assert tomorrow["tell_caller"] == (
        "Your table for 4 tomorrow at 7:30 pm is booked under Maria Lopez. See you then!")
    later = today + timedelta(days=9)
    assert restaurant.book_table("Maria Lopez", "19:30", 4, later.isoformat())["tell_caller"] \
        .startswith(f"Your table for 4 on {later:%A} {later.day} {later:%B} at 7:30 pm")
    unnamed = restaurant.book_table("Maria Lopez", "19:30", 4)
    assert unnamed["date"] == today.isoformat() and unnamed["tell_caller"].startswith(
        "Your table for 4 at 7:30 pm")
    past = restaurant.book_table("Maria Lopez", "19:30", 4, (today - timedelta(1)).isoformat())
    assert past["booked"] is False and "passed" in past["tell_caller"]
    # the same table and time on two days are two bookings
    assert tomorrow["booking_id"] != unnamed["booking_id"]
