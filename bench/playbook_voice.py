"""Benchmark: spoken bookings over WebRTC, a bundled booking playbook on the embedded defaults.

What a caller of a booking agent waits for: from the end of each thing they say to the agent's
first audible answer, measured from the audio alone by a real aiortc peer (bench/_peers.py, as
in bench/voice_latency.py). The callers and their lines are the quality benchmark's
(``_spoken_calls.CALLERS`` for the restaurant, ``VISITS`` with ``--playbook appointments``:
the last one asks for a taken slot; ``SUPPORT_CALLS`` with ``--playbook support``: a line
check, two tickets and a transfer, right when the tool the call needs got the caller's account
and category), said in our Piper voice; a call ends when the playbook
reaches its last stage (or its lines run out). Each variant's server keeps its calendar in an
empty data folder of its own. Each variant runs the server in its own process
(``--variant NAME=SETTINGS_JSON``, e.g. ``off='{"llm_prefill": false}'``); variants alternate
by caller, so a slow minute of the machine falls on all of them. The server computes its
playbooks' stage prompts before the first call (the steady state: server/warm.py).

Prints one JSON object: per variant, voice-to-voice p50/p95/mean of every turn, of the turns
that noted facts (the first three of a call), calls booked and booked right, and the server's
turn records (prompt tokens read after those found computed, first token).

    scripts/in-private-netns.sh python bench/playbook_voice.py --callers 10 \\
        --variant on='{}' --variant off='{"llm_prefill": false}'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._spoken_calls import (  # noqa: E402
    CALLERS,
    SUPPORT_CALLS,
    VISITS,
    caller_lines,
    support_lines,
    support_right,
    table_right,
    visit_lines,
    visit_right,
)
from bench._systems import System  # noqa: E402
from bench.voice_latency import save, speech48k, stats, strip_private  # noqa: E402

LOOPBACK = {"ice_host_addresses": "127.0.0.1", "ice_candidate_allow": "127.0.0.1"}


PLAYBOOKS = {  # callers, their lines, the stage a call ends in, the tool it must call, whether
    # that call's arguments are right, where a caller's name is
    "restaurant": (CALLERS, caller_lines, "confirmation", lambda _: "book_table", table_right, 4),
    "appointments": (VISITS, visit_lines, "done", lambda _: "book_appointment", visit_right, 3),
    "support": (SUPPORT_CALLS, support_lines, "closing", lambda call: call[2], support_right,
                0),
}


async def call(system: System, playbook: str, caller: tuple[Any, ...],
               speech: dict[str, Any]) -> dict[str, Any]:
    """One caller's booking: the greeting heard out, then each line, until the booking."""
    from bench._peers import RtcClient, turn, turn_end

    _, lines_of, last_stage, tool_of, right, name_at = PLAYBOOKS[playbook]
    tool = tool_of(caller)
    async with RtcClient(system.url + f"?playbook={playbook}") as client:
        await asyncio.wait_for(client.negotiate(), 60)
        await turn_end(client, time.monotonic() - 1)  # the playbook's greeting
        turns = []
        for line in lines_of(caller):
            result = await turn(client, speech[line])
            turns.append({"line": line, "v2v_ms": result["v2v_ms"]})
            print(f"#   {system.name} {caller[name_at]}: {line!r} {result['v2v_ms']} ms",
                  file=sys.stderr, flush=True)
            if reached(client, last_stage):
                break
        with contextlib.suppress(TimeoutError):  # a reply may go on after a pause of more
            while not reached(client, last_stage):  # than QUIET_S ("One moment, please.")
                await client.wait_for("stage-change", timeout=15,
                                      count=len(client.messages("stage-change")) + 1)
        booked = [json.loads(m["arguments"]) if isinstance(m.get("arguments"), str)
                  else m.get("arguments") for m in client.messages("tool-call-start")
                  if m.get("name") == tool]
        done = reached(client, last_stage)
    return {"caller": caller[name_at], "booked": done,
            "right": done and right(caller, booked[-1] if booked else {}), "turns": turns}


def reached(client: Any, stage: str) -> bool:
    return any(m.get("type") == "stage-change" and m.get("to") == stage
               for m in client.messages())


def summary(calls: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
    every = [t["v2v_ms"] for c in calls for t in c["turns"]]
    noting = [t["v2v_ms"] for c in calls for t in c["turns"][:3]]
    read = [r["prompt_read"] for r in records if r.get("prompt_read") is not None]
    first = [r["llm_ttft_ms"] for r in records if r.get("llm_ttft_ms") is not None]
    audio = [r["first_audio_ms"] for r in records if r.get("first_audio_ms") is not None]
    return {
        "calls": len(calls), "booked": sum(c["booked"] for c in calls),
        "booked_right": sum(c["right"] for c in calls),
        "v2v_ms": {**stats(every), "mean": round(statistics.mean(
            [v for v in every if v is not None] or [0]), 1)},
        "v2v_noting_ms": stats(noting),
        "server": {"turns": len(records),
                   "prompt_read": statistics.median(read) if read else None,
                   "first_token_ms": statistics.median(first) if first else None,
                   "first_audio_ms": statistics.median(audio) if audio else None},
        "_calls": calls, "_records": records,
    }


async def warm(system: System) -> float:
    assert system.proc is not None and system.proc.stdin is not None
    system.proc.stdin.write("warm\n")
    system.proc.stdin.flush()
    assert system.proc.stdout is not None
    return json.loads(await asyncio.to_thread(system.proc.stdout.readline))["warm_s"]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--playbook", choices=sorted(PLAYBOOKS), default="restaurant")
    ap.add_argument("--callers", type=int, default=len(CALLERS))
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=SETTINGS_JSON (default: one variant, the defaults)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    variants = [v.split("=", 1) for v in args.variant] or [["default", "{}"]]
    every, lines_of, *_ = PLAYBOOKS[args.playbook]
    callers = every[:args.callers]
    lines = sorted({line for c in callers for line in lines_of(c)})
    with tempfile.TemporaryDirectory() as folder:
        speech = {line: speech48k(line, Path(folder), pad=(0.5, 0.5), voice="piper")
                  for line in lines}
    systems = [System(f"ours_{name}", [sys.executable, "bench/_ours_proc.py", json.dumps(
        {"port": 0, **LOOPBACK, **json.loads(settings)})], "") for name, settings in variants]
    calls: dict[str, list[dict[str, Any]]] = {s.name: [] for s in systems}
    records: dict[str, list[dict[str, Any]]] = {s.name: [] for s in systems}
    warmed: dict[str, float] = {}
    async with contextlib.AsyncExitStack() as stack:
        for system in systems:  # one at a time: each computes its stage prompts alone
            data = stack.enter_context(tempfile.TemporaryDirectory())  # its own calendar
            os.environ["VOICE_SERVER_DATA_DIR"] = data  # (the server process takes it)
            await stack.enter_async_context(system)
            warmed[system.name] = await warm(system)
            await system.dump()
        for caller in callers:  # alternating: a slow minute falls on every variant
            for system in systems:
                calls[system.name].append(await call(system, args.playbook, caller, speech))
        for system in systems:
            records[system.name] = (await system.dump())["turns"]
    result = {"bench": "playbook_voice", "playbook": args.playbook, "callers": len(callers),
              "warm_s": warmed,
              **{name: summary(calls[name], records[name]) for name in calls}}
    print(json.dumps(strip_private(result), indent=1))
    save(args.json, result)


if __name__ == "__main__":
    asyncio.run(main())
