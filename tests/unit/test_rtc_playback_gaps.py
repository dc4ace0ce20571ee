"""Playback gaps (server/rtc_audio.py): the outbound track ran dry between two pieces of an
answer because the next one was not synthesized yet; each turn records them. And the track's
record of what it played (the echo reference) keeps to when frames were sent."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from voice_server.pipeline.speech import HeldOutput
from voice_server.server.playout import PlayoutSpeechOutput
from voice_server.server.rtc_audio import RATE, OutboundAudioTrack


async def _pump(track: OutboundAudioTrack, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await track.recv()  # paced in real time, as aiortc's sender calls it


async def _emit(_message) -> None:
    return None


async def test_a_piece_queued_after_the_last_one_ended_is_a_gap() -> None:
    track = OutboundAudioTrack()
    output = PlayoutSpeechOutput(track, _emit)
    stop = asyncio.Event()
    pump = asyncio.create_task(_pump(track, stop))
    long, piece = np.full(RATE, 1000, dtype=np.int16), np.full(RATE // 25, 1000, dtype=np.int16)
    try:
        await output.play("one", long, RATE)  # 1 s: time to spare for resampling the next
        await output.play("two", piece, RATE)  # queued while one plays: no gap
        await output.drain()
        await asyncio.sleep(0.15)  # the track plays silence: the next piece is late
        await output.play("three", piece, RATE)
        await output.drain()
    finally:
        stop.set()
        await pump
    assert len(output.gaps_ms) == 1
    assert 150 <= output.gaps_ms[0] < 1000


async def test_a_held_answer_reports_its_inner_gaps() -> None:
    inner = PlayoutSpeechOutput(OutboundAudioTrack(), _emit)
    inner.gaps_ms.append(120.0)
    assert HeldOutput(inner, _emit).gaps_ms == [120.0]


async def test_a_frame_sent_after_a_stall_is_recorded_as_played_then() -> None:
    """Over 0.2 s late (an event loop's stall) the track starts its clock again from now
    instead of bursting; the frame it then sends plays from now, and the echo reference must
    say so: recorded at the time it was due, it sat 0.3 s early, beside the frame before."""
    track = OutboundAudioTrack()
    track.enqueue(np.full(RATE, 8000, dtype=np.int16))
    started = time.monotonic()
    await track.recv()  # the first frame: [started, started + 20 ms)
    await asyncio.sleep(0.3)  # the stall
    sent = time.monotonic()
    await track.recv()  # 0.28 s late: resynchronized

    def loudness(start: float, end: float) -> float:
        return float(np.abs(track.echo.recent(end - start, end)).mean())

    assert loudness(sent - 0.005, sent + 0.025) > 1000  # played from when it was sent
    assert loudness(started + 0.025, started + 0.2) < 10  # and nothing after the first
