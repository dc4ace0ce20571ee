"""Tools of ``support.yaml``: a fake account book, outage map, ticket desk and call transfer."""

from __future__ import annotations

import hashlib

ACCOUNTS = {
    "12345678": {"name": "Ada Lovelace", "plan": "Fibre 500", "postcode": "N1 9GU",
                 "last_bill": {"amount": 42.50, "currency": "EUR", "due": "2026-12-01"}},
    "87654321": {"name": "Alan Turing", "plan": "Fibre 100", "postcode": "M13 9PL",
                 "last_bill": {"amount": 29.99, "currency": "EUR", "due": "2026-12-03"}},
}
OUTAGES = {"M13": "fibre cut near the exchange; repair expected by 18:00"}


def service_status(postcode: str) -> dict:
    area = postcode.strip().upper().split()[0]
    if area in OUTAGES:
        return {"postcode": postcode, "outage": True, "details": OUTAGES[area]}
    return {"postcode": postcode, "outage": False}


def lookup_account(account: str) -> dict:
    found = ACCOUNTS.get(account)
    if found is None:
        return {"found": False, "account": account}
    return {"found": True, "account": account, **found}


def create_ticket(account: str, category: str, summary: str) -> dict:
    if account not in ACCOUNTS:
        raise ValueError(f"unknown account {account}")
    digest = hashlib.sha1(f"{account}|{category}|{summary}".encode()).hexdigest()[:6]
    return {"ticket_id": f"T-{digest.upper()}", "category": category, "status": "open"}


async def transfer_to_human(team: str, summary: str = "", *, ctx) -> dict:
    """Hand the call over (a real deployment would call its telephony API here)."""
    return {"transferred": True, "team": team, "queue": ctx.options.get("queue", "default"),
            "summary": summary, "expected_wait_s": 60}
