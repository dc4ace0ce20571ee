"""Twilio's side of a bidirectional Media Stream, as Twilio documents it ("Media Streams -
WebSocket Messages"), for tests and benchmarks that cannot reach Twilio.

It sends ``connected`` and ``start`` (with ``customParameters``), then a ``media`` event every
20 ms in real time (the caller's microphone: queued speech, else mu-law silence), with
increasing ``sequenceNumber``, ``chunk`` and ``timestamp``; ``dtmf`` and ``stop`` on request.
It plays the agent's ``media`` as a phone would (each 20 ms frame after the one before),
echoes each ``mark`` once the audio sent before it has played, and on ``clear`` drops the
audio it holds and echoes the pending marks at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import time
import wave
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from voice_server.pipeline.audio import MulawCodec

FRAME = 160  # 20 ms of 8 kHz mu-law
SILENCE = b"\xff" * FRAME  # mu-law zero


def wav_to_pcm8k(wav: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(wav)) as w:
        assert w.getframerate() == 8000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


@dataclass
class Played:
    """The agent's audio as the caller hears it."""

    frames: list[tuple[float, np.ndarray]] = field(default_factory=list)  # (play time, pcm)

    def voiced_times(self, threshold: float = 300.0) -> list[float]:
        return [t for t, pcm in self.frames
                if len(pcm) and np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > threshold]

    def first_voiced_after(self, t0: float) -> float | None:
        return next((t for t in self.voiced_times() if t >= t0), None)

    def pcm(self) -> np.ndarray:
        return np.concatenate([p for _, p in self.frames]) if self.frames else \
            np.zeros(0, dtype=np.int16)


class FakeTwilio:
    """``async with FakeTwilio(ws_url, parameters={...}) as call:`` one call."""

    def __init__(self, url: str, *, parameters: dict[str, str] | None = None,
                 headers: dict[str, str] | None = None, call_sid: str = "CA" + "1" * 32,
                 stream_sid: str = "MZ" + "2" * 32) -> None:
        self.url = url
        self.parameters = parameters or {}
        self.headers = headers or {}
        self.call_sid = call_sid
        self.stream_sid = stream_sid
        self.codec = MulawCodec()
        self.played = Played()
        self.marks_sent: list[str] = []  # by the server
        self.marks_echoed: list[tuple[float, str]] = []
        self.clears: list[float] = []  # when a clear arrived
        self.events: list[dict[str, Any]] = []  # everything the server sent but media
        self.closed = asyncio.Event()
        self._mic: list[tuple[bytes, bool, bool]] = []  # 20 ms frame, voiced, first of a say
        self._mic_idle = asyncio.Event()
        self._seq = 0
        self._chunk = 0
        self._sent_ms = 0
        self._play_end = 0.0  # when the audio held so far finishes playing
        self._pending_marks: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.speech_started: float | None = None  # the first voiced frame of the last say()
        self._onset_pending = False
        self.speech_ended: float | None = None  # when its last voiced frame was sent

    # ---- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> FakeTwilio:
        self._http = aiohttp.ClientSession()
        self.ws = await self._http.ws_connect(self.url, headers=self.headers)
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send({
            "event": "start", "sequenceNumber": self._next_seq(), "streamSid": self.stream_sid,
            "start": {"accountSid": "AC" + "3" * 32, "streamSid": self.stream_sid,
                      "callSid": self.call_sid, "tracks": ["inbound"],
                      "customParameters": self.parameters,
                      "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000,
                                      "channels": 1}}})
        self._tasks = [asyncio.create_task(self._microphone(), name="fake-twilio-mic"),
                       asyncio.create_task(self._receive(), name="fake-twilio-recv")]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in [*self._tasks, *self._pending_marks.values()]:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.ws.close()
        await self._http.close()

    # ---- the caller -------------------------------------------------------------------------
    def say(self, pcm8k: np.ndarray, *, then_silence_s: float = 0.0) -> None:
        """Queue speech (8 kHz int16) on the microphone, then silence."""
        data = self.codec.encode(pcm8k)
        for i in range(0, len(data), FRAME):
            pcm = pcm8k[i:i + FRAME].astype(np.float64)
            voiced = bool(len(pcm)) and float(np.sqrt(np.mean(pcm ** 2))) > 300
            self._mic.append((data[i:i + FRAME], voiced, i == 0))
        self._mic.extend([(SILENCE, False, False)] * int(then_silence_s * 50))
        self._mic_idle.clear()

    def line_busy(self) -> bool:
        """Agent audio still to be played (or marks not yet echoed)."""
        return bool(self._pending_marks) or self._play_end > time.monotonic()

    async def until_said(self) -> None:
        await self._mic_idle.wait()

    async def dtmf(self, digit: str) -> None:
        await self._send({"event": "dtmf", "streamSid": self.stream_sid,
                          "sequenceNumber": self._next_seq(),
                          "dtmf": {"track": "inbound_track", "digit": digit}})

    async def stop(self) -> None:
        await self._send({"event": "stop", "sequenceNumber": self._next_seq(),
                          "streamSid": self.stream_sid,
                          "stop": {"accountSid": "AC" + "3" * 32, "callSid": self.call_sid}})

    async def send_raw(self, text: str) -> None:
        await self.ws.send_str(text)

    # ---- internals --------------------------------------------------------------------------
    def _next_seq(self) -> str:
        self._seq += 1
        return str(self._seq)

    async def _send(self, event: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(event))

    async def _microphone(self) -> None:
        """A media event every 20 ms, in real time, as Twilio sends the caller's audio."""
        start = time.monotonic()
        n = 0
        while True:
            if self._mic:
                frame, voiced, first = self._mic.pop(0)
                if first:
                    self._onset_pending = True
                if voiced:
                    now = time.monotonic()
                    if self._onset_pending:
                        self.speech_started, self._onset_pending = now, False
                    self.speech_ended = now
            else:
                frame = SILENCE
                self._mic_idle.set()
            self._chunk += 1
            await self._send({"event": "media", "sequenceNumber": self._next_seq(),
                              "streamSid": self.stream_sid,
                              "media": {"track": "inbound", "chunk": str(self._chunk),
                                        "timestamp": str(self._sent_ms),
                                        "payload": base64.b64encode(frame).decode()}})
            self._sent_ms += 20
            n += 1
            delay = start + n * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    async def _receive(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                event = json.loads(msg.data)
                assert event.get("streamSid") == self.stream_sid, event
                kind = event["event"]
                if kind == "media":
                    pcm = self.codec.decode(base64.b64decode(event["media"]["payload"]))
                    now = time.monotonic()
                    at = max(now, self._play_end)
                    self._play_end = at + len(pcm) / 8000
                    self.played.frames.append((at, pcm))
                    continue
                self.events.append(event)
                if kind == "mark":
                    name = event["mark"]["name"]
                    self.marks_sent.append(name)
                    self._pending_marks[name] = asyncio.create_task(
                        self._echo_mark(name, self._play_end))
                elif kind == "clear":
                    now = time.monotonic()
                    self.clears.append(now)
                    self.played.frames = [(t, p) for t, p in self.played.frames if t < now]
                    self._play_end = now
                    for name, task in list(self._pending_marks.items()):
                        task.cancel()
                        await self._mark_played(name)
        finally:
            self.closed.set()

    async def _echo_mark(self, name: str, due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        await self._mark_played(name)

    async def _mark_played(self, name: str) -> None:
        if self._pending_marks.pop(name, None) is None:
            return
        self.marks_echoed.append((time.monotonic(), name))
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._send({"event": "mark", "sequenceNumber": self._next_seq(),
                              "streamSid": self.stream_sid, "mark": {"name": name}})
