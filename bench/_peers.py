"""Client peers and per-turn measurement shared by both systems in the latency benchmark.

Every measurement comes from the audio alone, the same way for voice_server and Pipecat: the
client knows when its WAV's speech ends (the mic track's clip start + the offset of the last loud
sample) and timestamps each received 20 ms frame. voice-to-voice = first loud received frame
after the end of speech; the turn ends after ``QUIET_S`` without loud frames (so an empty answer
or an empty transcript can never hang the run: it is counted as ``no_reply``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from tests.rtc.peer import RtcClient, mono_pcm
from voice_server.compat import restrict_ice_host_addresses, set_audio_jitter_prefetch
from voice_server.pipeline.audio import rms
from voice_server.server.rtc_audio import OutboundAudioTrack

__all__ = ["LOUD", "PipecatClient", "RtcClient", "barge_in", "first_loud_after", "loud_seconds",
           "speech_bounds", "turn", "turn_end"]

LOUD = 300.0  # RMS of a 20 ms frame that counts as agent speech (about -40 dBFS)
QUIET_S = 1.5


def speech_bounds(pcm48: np.ndarray) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(pcm48) > 500)
    return loud[0] / 48000, loud[-1] / 48000


class PipecatClient:
    """An aiortc peer for Pipecat's SmallWebRTC signaling (``POST /api/offer``)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = OutboundAudioTrack()
        self.heard: list[tuple[float, np.ndarray]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._first_frame = asyncio.Event()
        self.pc.on("track", self._on_track)

    async def __aenter__(self) -> PipecatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.mic.stop()
        await self.pc.close()

    async def negotiate(self, timeout: float = 120) -> None:
        self.pc.addTrack(self.mic)
        offer = await self.pc.createOffer()
        restrict_ice_host_addresses(self.pc, ["127.0.0.1"])
        await self.pc.setLocalDescription(offer)
        async with aiohttp.ClientSession() as http, http.post(
                f"{self.base_url}/api/offer",
                json={"sdp": self.pc.localDescription.sdp, "type": "offer"}) as resp:
            answer = await resp.json()
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"],
                                                                 type=answer["type"]))
        set_audio_jitter_prefetch(self.pc, 1)  # the same receiving buffer as RtcClient
        # the bot's output track delivers frames once its pipeline (models) is up
        await asyncio.wait_for(self._first_frame.wait(), timeout)

    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._record(track), name="pipecat-record"))

    async def _record(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.heard.append((time.monotonic(), mono_pcm(frame)))
            self._first_frame.set()


async def _play(client: Any, pcm48: np.ndarray, timeout: float = 10) -> float:
    """Queue audio on the mic; the time it starts (its track is pulled only while the peer
    connection lives, so a dead connection raises TimeoutError instead of hanging)."""
    clip = client.mic.enqueue(pcm48)
    await asyncio.wait_for(clip.started.wait(), timeout)
    return clip.started_at


async def turn(client: Any, pcm48: np.ndarray, *, timeout: float = 40) -> dict[str, Any]:
    """Speak one utterance; wait for the reply to start and end. Returns client timestamps."""
    _, end_off = speech_bounds(pcm48)
    speech_end = await _play(client, pcm48) + end_off
    deadline = speech_end + timeout
    first = last = None
    index = 0
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # the recorder has no event per frame; poll its list
        heard = client.heard
        for t, pcm in heard[index:]:
            if t > speech_end and rms(pcm) > LOUD:
                first = first or t
                last = t
        index = len(heard)
        now = time.monotonic()
        if first is not None and now - last >= QUIET_S:
            break
        if first is None and now - speech_end > timeout:
            break
    return {"speech_end": speech_end, "first_loud": first, "last_loud": last,
            "v2v_ms": round((first - speech_end) * 1000, 1) if first else None}


async def barge_in(client: Any, ask48: np.ndarray, interrupt48: np.ndarray,
                   *, talk_s: float = 1.5, timeout: float = 40,
                   on_answer: Callable[[], None] | None = None) -> dict[str, Any]:
    """Ask for a long answer, interrupt it ``talk_s`` after it starts; measure how long after
    the interruption's onset the agent's audio stops (last loud frame before the interrupting
    speech ends: no reply to it can come that early). ``on_answer`` runs once the long answer
    is heard (e.g. to make the reply to the interruption short). A long answer that never
    starts is an invalid sample (``talking_at_onset`` false, ``no_answer`` true)."""
    _, end_off = speech_bounds(ask48)
    speech_end = await _play(client, ask48) + end_off
    if await first_loud_after(client, speech_end, timeout) is None:
        return {"talking_at_onset": False, "no_answer": True, "reaction_ms": None}
    if on_answer is not None:
        on_answer()
    await asyncio.sleep(talk_s)
    onset_off, int_end_off = speech_bounds(interrupt48)
    t0 = await _play(client, interrupt48)
    onset, int_end = t0 + onset_off, t0 + int_end_off
    await asyncio.sleep(max(0.0, int_end - time.monotonic()) + 0.3)
    before = [t for t, p in client.heard if onset - 0.3 <= t < onset and rms(p) > LOUD]
    loud = [t for t, p in client.heard if onset <= t <= int_end + 0.2 and rms(p) > LOUD]
    result = {"talking_at_onset": bool(before), "no_answer": False,
              "reaction_ms": round(((max(loud) if loud else onset) - onset) * 1000, 1)}
    await turn_end(client, int_end)
    return result


async def turn_end(client: Any, since: float, timeout: float = 40) -> float | None:
    """Wait for the answer after ``since`` to finish (or never come); the time of its last
    loud frame (None: none came)."""
    deadline = since + timeout
    last = None
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        loud = [t for t, p in client.heard[-200:] if t > since and rms(p) > LOUD]
        last = loud[-1] if loud else last
        if last is not None and time.monotonic() - last >= QUIET_S:
            break
    return last


async def first_loud_after(client: Any, after: float, timeout: float = 40) -> float | None:
    """Wait for the agent's first loud frame after ``after``: its time (None: none within
    ``timeout``)."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                await asyncio.sleep(0.05)
                started = next((t for t, p in client.heard if t > after and rms(p) > LOUD),
                               None)
                if started is not None:
                    return started
    except TimeoutError:
        return None


def loud_seconds(client: Any, start: float, end: float) -> float:
    """Seconds of the agent's loud frames heard between ``start`` and ``end``."""
    return 0.02 * sum(1 for t, p in client.heard if start <= t <= end and rms(p) > LOUD)
