"""The phone line's pacing (server/phone_line.py) after the event loop stalled: the audio goes
on from when it can be played, and the record of what the caller heard (the echo reference)
says so."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

from voice_server.server.phone_line import RATE, PhoneLine


async def test_a_frame_sent_after_a_stall_is_recorded_as_played_then() -> None:
    sent: list[tuple[float, str]] = []

    async def send(text: str) -> None:
        sent.append((time.monotonic(), json.loads(text)["event"]))

    async with PhoneLine(send, "MZ0") as line:
        started = time.monotonic()
        line.enqueue(np.full(RATE, 8000, dtype=np.int16))  # 1 s
        await asyncio.sleep(0.2)
        time.sleep(0.5)  # noqa: ASYNC251 (the event loop stalls: Twilio's buffer runs dry)
        resumed = time.monotonic()
        await asyncio.sleep(0.2)

        def loudness(start: float, end: float) -> float:
            return float(np.abs(line.echo.recent(end - start, end)).mean())

        # what was sent after the stall plays from then on: recorded on the old timeline it
        # sat 0.5 s early, and a caller's echo of it came that much later than searched
        assert loudness(resumed + 0.03, resumed + 0.15) > 1000
        assert loudness(started + 0.35, started + 0.65) < 10  # the stall itself: nothing
    assert [event for _, event in sent].count("media") > 10
