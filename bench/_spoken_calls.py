"""Spoken calls for the quality benchmark (bench/quality.py): one turn over the WebSocket, and
whole calls with the bundled playbooks, each line said in our Piper voice as `audio`.

- restaurant (`CALLERS`): a table booking; two callers ask for 20:00, which the tool always
  reports as fully booked: one names another time, the other takes the one offered (21:00).
  The playbook reads the details back before it books: a caller says yes to a read-back that
  is right, says so once when a detail is wrong ("No, the name is Laura Chen."), and spells
  the name when asked to (`reaction`), as a person would;
- appointments (`VISITS`): a dental appointment on a weekday named (worked out from today);
  the last caller asks for a taken slot and takes half past ten;
- support (`SUPPORT_CALLS`): a line check with an outage in the area, a slow line that a
  restart does not fix (a ticket), a bill explained and disputed (a ticket), and a caller who
  asks for a person (a transfer). Account numbers are said digit by digit.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import websockets

from voice_server.playbook import spoken_time


# ---- one turn over the WebSocket ---------------------------------------------------------------
async def ask(ws: Any, wav: bytes, seen: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One spoken turn; playbook events (stage changes, tool calls) go to ``seen``."""
    started = time.monotonic()
    await ws.send(json.dumps({"type": "audio", "data": base64.b64encode(wav).decode()}))
    turn: dict[str, Any] = {"transcript": "", "answer": "", "error": None}
    last_audio: float | None = None
    async with asyncio.timeout(120):
        while True:
            msg = json.loads(await ws.recv())
            kind = msg["type"]
            if seen is not None and kind in ("stage-change", "tool-call-start", "tool-call-end"):
                seen.append(msg)
            elif kind == "transcript" and msg.get("isFinal"):
                turn["transcript"] = msg["text"]
                if not msg["text"].strip():  # heard nothing: the server answers nothing
                    break
            elif kind == "llm":
                turn["answer"] = msg["text"]
            elif kind == "error":
                turn["error"] = msg["code"]
                break
            elif kind == "tts-chunk":
                turn.setdefault("first_audio_s", round(time.monotonic() - started, 2))
                last_audio = time.monotonic()
            elif kind == "tts-complete":
                break
    # to the answer's last audio (its whole answer synthesized): `tts-complete` comes once the
    # client has played it, seconds later
    turn["seconds"] = round((last_audio or time.monotonic()) - started, 2)
    return turn


# ---- booking runs with the restaurant playbook -------------------------------------------------
CALLERS = [  # party (spoken, number), time (spoken, HH:MM), name[, (reply to "full", time booked)]
    ("two", 2, "seven thirty in the evening", "19:30", "Mario Rossi"),
    ("four", 4, "eight o'clock tonight", "20:00", "Anna Smith",
     ("Then nine o'clock, please.", "21:00")),
    ("three", 3, "seven in the evening", "19:00", "John Baker"),
    ("six", 6, "half past eight in the evening", "20:30", "Laura Chen"),
    ("two", 2, "nine o'clock tonight", "21:00", "Peter Brown"),
    ("five", 5, "six thirty in the evening", "18:30", "Maria Garcia"),
    ("four", 4, "seven fifteen tonight", "19:15", "David Miller"),
    ("three", 3, "eight thirty tonight", "20:30", "Sarah Wilson"),
    ("two", 2, "six o'clock in the evening", "18:00", "James Taylor"),
    ("eight", 8, "eight in the evening", "20:00", "Emma Davis", ("Yes, that works.", "21:00")),
]
OPENING = "Hello, I would like to book a table, please."
FOLLOW_UPS = ("Yes, please book it.", "Please go ahead and book the table.")
# playbooks/tools/restaurant.py: 20:00 is always fully booked, so those two callers hear "no
# table" and then name another time or take the one offered: the run must book that one.


def caller_lines(caller: tuple[Any, ...]) -> list[str]:
    party, _, when, _, name, *full = caller
    other = [full[0][0]] if full else []
    return [OPENING, f"A table for {party} people at {when}, please.", f"My name is {name}.",
            *other, *FOLLOW_UPS]


async def spoken_booking(url: str, playbook: str, lines: list[str], wavs: dict[str, bytes],
                         done_stage: str, tool: str,
                         correct: Callable[[str], str | None] | None = None) -> dict[str, Any]:
    """One caller says ``lines`` to ``playbook`` until it reaches ``done_stage``: the turns,
    the events of the first one, the tool calls, and ``tool``'s last successful arguments.
    ``correct(answer)``: a line the caller says next besides ``lines`` (each once): a yes to
    a read-back, a detail put right."""
    seen: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    corrections: list[str] = []
    to_say = list(lines)
    async with websockets.connect(f"{url}?playbook={playbook}", max_size=None) as ws:
        await ws.recv()
        while to_say:
            turns.append(await ask(ws, wavs[to_say.pop(0)], seen))
            if len(turns) == 1:
                first_events = list(seen)
            if any(m["type"] == "stage-change" and m["to"] == done_stage for m in seen):
                break
            line = correct(turns[-1]["answer"]) if correct else None
            if line and line not in corrections:
                corrections.append(line)
                to_say.insert(0, line)
    calls = {m["callId"]: m for m in seen if m["type"] == "tool-call-start"}
    booked = [calls[m["callId"]]["arguments"] for m in seen
              if m["type"] == "tool-call-end" and not m.get("error") and _done(m.get("result"))
              and calls.get(m["callId"], {}).get("name") == tool]
    reached = any(m["type"] == "stage-change" and m["to"] == done_stage for m in seen)
    return {"turns": turns, "first_events": first_events, "booked": bool(booked),
            "reached": reached, "corrections": corrections,
            "args": booked[-1] if booked else {},
            "report": {
                "turns": [{k: t.get(k) for k in ("transcript", "answer", "error",
                                                 "first_audio_s", "seconds")} for t in turns],
                "tools": [{"name": c["name"], "arguments": c["arguments"]}
                          for c in calls.values()]}}


def _done(result: Any) -> bool:
    """A result that says it did not do it (a taken slot: ``booked: false``; an unknown
    account: ``found: false``) is an answer, not a booking."""
    return not (isinstance(result, dict)
                and (result.get("booked") is False or result.get("found") is False))


def table_right(caller: tuple[Any, ...], args: dict[str, Any]) -> bool:
    """``book_table``'s ``args`` are the caller's: their time (or the one they took instead
    of a full one), their party size, their first name."""
    _, size, _, hhmm, name, *full = caller
    hhmm = full[0][1] if full else hhmm
    return args.get("time") == hhmm and args.get("party_size") == size \
        and name.split()[0].lower() in str(args.get("name", "")).lower()


def reaction(caller: tuple[Any, ...], answer: str) -> str | None:
    """What ``caller`` says to the agent's ``answer`` besides the script: to a read-back
    ("..., under Lord Chen. Shall I book it?") a correction of the first of name, party size
    and time that it does not say right, or a yes; to "could you spell the name" the name
    spelled out."""
    said = answer.lower()
    yes, name, party, time, spelled = correction_lines(caller)
    if "spell" in said:
        return spelled
    if "shall i book" not in said:
        return None
    if caller[4].split()[0].lower() not in said:
        return name
    if f"for {caller[1]} " not in said:
        return party
    return time if spoken_time(caller[3]) not in said else yes


def correction_lines(caller: tuple[Any, ...]) -> list[str]:
    """A yes, the corrections of name, party size and time, and the name spelled out."""
    party, _, when, _, name, *_ = caller
    spelled = " ".join(f"{word}, {' '.join(word.upper())}." for word in name.split())
    return ["Yes, that's right.", f"No, the name is {name}.", f"No, we are {party} people.",
            f"No, at {when}.", spelled]


async def booking_run(url: str, caller: tuple[Any, ...], wavs: dict[str, bytes]) -> dict[str, Any]:
    call = await spoken_booking(url, "restaurant", caller_lines(caller), wavs, "confirmation",
                                "book_table", functools.partial(reaction, caller))
    return {
        "caller": caller[4],
        "corrections": call["corrections"],
        "booked": call["booked"],
        "right": call["booked"] and table_right(caller, call["args"]),
        "asked_for_time": "?" in call["turns"][0]["answer"] and not any(  # no time invented
            m["type"] == "tool-call-start" and m["name"] in ("check_availability", "book_table")
            for m in call["first_events"]),
        **call["report"],
    }


def bookings_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    if not runs:
        return {}
    times = [t["seconds"] for r in runs for t in r["turns"]]
    firsts = [t.get("first_audio_s", t["seconds"]) for r in runs for t in r["turns"]]
    return {
        "runs": len(runs), "booked": sum(r["booked"] for r in runs),
        # callers who said a detail was wrong (a yes to a read-back is no correction)
        "corrected": sum(any(not line.startswith("Yes") for line in r.get("corrections", ()))
                         for r in runs),
        "booked_right": sum(r["right"] for r in runs),
        **({"asked_for_time": sum(r["asked_for_time"] for r in runs)}
           if "asked_for_time" in runs[0] else {}),
        "turn_s": {"p50": round(statistics.median(times), 2),
                   "mean": round(statistics.mean(times), 2), "max": max(times)},
        "first_audio_s": {"p50": round(statistics.median(firsts), 2),
                          "mean": round(statistics.mean(firsts), 2), "max": max(firsts)},
        "all_turns": [[t.get("first_audio_s"), t["seconds"]] for r in runs for t in r["turns"]],
        "failed": [r for r in runs if not r["right"]],
    }


# ---- booking runs with the appointments playbook ----------------------------------------------
VISITS = [  # day, time (spoken, HH:MM), name[, (reply to "taken", time booked)]
    ("Monday", "at ten in the morning", "10:00", "Tom Hardy"),
    ("Tuesday", "at half past two in the afternoon", "14:30", "Maria Gonzalez"),
    ("Wednesday", "at nine thirty in the morning", "09:30", "Alan Turing"),
    ("Thursday", "at eleven o'clock", "11:00", "Ada Lovelace"),
    ("Monday", "at ten in the morning", "10:00", "Grace Hopper",  # Tom Hardy's: taken
     ("Half past ten, please.", "10:30")),
]
VISIT_OPENING = "Hello, I would like to book a dental appointment, please."


def visit_lines(visit: tuple[Any, ...]) -> list[str]:
    day, when, _, name, *taken = visit
    return [VISIT_OPENING, f"On {day} {when}, please.", f"My name is {name}.",
            *([taken[0][0]] if taken else []), "Yes, please book it."]


def visit_right(visit: tuple[Any, ...], args: dict[str, Any]) -> bool:
    """``book_appointment``'s ``args`` are the caller's: the weekday they named (worked out
    from today), their time (or the one they took instead of a taken one), their name."""
    from datetime import date

    from voice_server.playbook.heard import day_named

    day, _, hhmm, name, *taken = visit
    hhmm = taken[0][1] if taken else hhmm
    return args.get("date") == str(day_named(day, date.today())) and \
        args.get("time") == hhmm and name.split()[0].lower() in str(args.get("name", "")).lower()


async def visit_run(url: str, visit: tuple[Any, ...], wavs: dict[str, bytes]) -> dict[str, Any]:
    """One caller books with the appointments playbook; right: ``visit_right``."""
    call = await spoken_booking(url, "appointments", visit_lines(visit), wavs, "done",
                                "book_appointment")
    return {
        "caller": visit[3], "booked": call["booked"],
        "right": call["booked"] and visit_right(visit, call["args"]),
        "asked_for_time": "?" in call["turns"][0]["answer"] and not any(  # no day invented
            m["type"] == "tool-call-start" for m in call["first_events"]),
        **call["report"],
    }




# ---- calls to the support playbook -------------------------------------------------------------
SUPPORT_CALLS = [  # what the caller says, the tool that must succeed, the arguments it must get
    ("outage", ["Hello, my internet keeps dropping out.", "My account number is 8 7 6 5 4 3 2 1.",
                "Okay, thank you, that's all."],
     "check_line", {"account": "87654321"}),
    ("ticket", ["Hi, my wifi is really slow.", "It's 1 2 3 4 5 6 7 8.",
                "I restarted the router and it is still slow.",
                "It has been slow every evening since Monday."],
     "create_ticket", {"account": "12345678", "category": "outage"}),
    ("billing", ["Hello, I have a question about my bill.", "My account number is 1 2 3 4 5 6 7 8.",
                 "I was charged twice, I want to dispute it.",
                 "I was charged twice in November."],
     "create_ticket", {"account": "12345678", "category": "billing"}),
    ("person", ["My internet is down and I want to talk to a person."],
     "transfer_to_human", {}),
]


def support_lines(call: tuple[Any, ...]) -> list[str]:
    return list(call[1])


def support_right(call: tuple[Any, ...], args: dict[str, Any]) -> bool:
    """The call's tool got the arguments it needs (its account, its category)."""
    return all(args.get(k) == v for k, v in call[3].items())


async def support_run(url: str, call: tuple[Any, ...], wavs: dict[str, bytes]) -> dict[str, Any]:
    """One support call; right: the call reached the wrap-up (``closing``) with its tool
    called with the arguments it needs (``support_right``)."""
    kind, lines, tool, _ = call
    done = await spoken_booking(url, "support", lines, wavs, "closing", tool)
    return {"caller": kind, "booked": done["booked"],
            "right": done["booked"] and done["reached"] and support_right(call, done["args"]),
            **done["report"]}
