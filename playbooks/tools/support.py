"""Tools of ``support.yaml``: a fake account book, outage map, ticket desk and call transfer."""

from __future__ import annotations

import hashlib
from datetime import date

ACCOUNTS = {
    "12345678": {"name": "Ada Lovelace", "plan": "Fibre 500", "postcode": "N1 9GU",
                 "last_bill": {"amount": 42.50, "currency": "EUR", "due": "2026-12-01"}},
    "87654321": {"name": "Alan Turing", "plan": "Fibre 100", "postcode": "M13 9PL",
                 "last_bill": {"amount": 29.99, "currency": "EUR", "due": "2026-12-03"}},
}
CURRENCIES = {"EUR": "euros"}
OUTAGES = {"M13": "fibre cut near the exchange; repair expected by 18:00"}


def service_status(postcode: str) -> dict:
    area = postcode.strip().upper().split()[0]
    if area in OUTAGES:
        return {"postcode": postcode, "outage": True, "details": OUTAGES[area]}
    return {"postcode": postcode, "outage": False}


def check_line(account: str) -> dict:
    """The account's line and the outages in its area, with what to tell the caller: a small
    model passes a ready sentence on, where it mixed up flags ("an outage with a cause of 'no
    fault'") and spoke of "the caller"."""
    found = ACCOUNTS.get(account)
    if found is None:
        return _unknown(account)
    status = service_status(found["postcode"])
    tell = (f"There is an outage in your area: a {status['details']}." if status["outage"] else
            "Your line looks fine and there is no outage in your area. Please restart your "
            "router, wait two minutes, and tell me whether that helped.")
    return {"found": True, "account": account, "name": found["name"], "plan": found["plan"],
            "outage": status["outage"], "tell_caller": tell}


def lookup_account(account: str) -> dict:
    found = ACCOUNTS.get(account)
    if found is None:
        return _unknown(account)
    bill = found["last_bill"]
    due = date.fromisoformat(bill["due"])
    return {"found": True, "account": account, **found,
            "tell_caller": f"Your last bill, for {found['plan']}, is {bill['amount']:.2f} "
                           f"{CURRENCIES[bill['currency']]}, due on {due.day} "
                           f"{due.strftime('%B')}."}


def _unknown(account: str) -> dict:
    return {"found": False, "account": account,
            "tell_caller": f"I can't find an account with the number {' '.join(account)}. "
                           "Could you say it again?"}


def create_ticket(account: str, category: str, summary: str) -> dict:
    if account not in ACCOUNTS:
        raise ValueError(f"unknown account {account}")
    digest = hashlib.sha1(f"{account}|{category}|{summary}".encode()).hexdigest()
    ticket = str(100000 + int(digest, 16) % 900000)  # digits: easy to say and to hear
    team = "The billing team" if category == "billing" else "An engineer"
    return {"ticket_id": ticket, "category": category, "status": "open",
            "tell_caller": f"Your ticket number is {' '.join(ticket)}. {team} will call you "
                           "back within a day."}


async def transfer_to_human(team: str, summary: str = "", *, ctx) -> dict:
    """Hand the call over (a real deployment would call its telephony API here)."""
    return {"transferred": True, "team": team, "queue": ctx.options.get("queue", "default"),
            "summary": summary, "expected_wait_s": 60,
            "tell_caller": f"I'm transferring you to our {team} team now. A person will pick "
                           "up in about a minute."}
