"""The agent's voice on a phone call (Twilio Media Streams): clips of 8 kHz speech sent as
20 ms mu-law ``media`` events paced in real time, a ``mark`` after each sentence, ``clear`` to
cut it. A sentence counts as heard when Twilio echoes its mark (the audio before it has
played); ``clear`` makes Twilio echo the marks it dropped. A ``ClipQueue`` for
``playout.PlayoutSpeechOutput`` and a ``listening.Playback`` for turn-taking.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np

from ..pipeline.audio import MulawCodec
from ..pipeline.echo import EchoReference
from ..protocol import twilio
from .playout import Clip

__all__ = ["PhoneLine"]

log = logging.getLogger(__name__)

RATE = 8000
FRAME = RATE // 50  # 20 ms
LEAD_FRAMES = 3  # sent ahead of real time, so Twilio's buffer never runs dry between frames
MARK_GRACE_S = 3.0  # a mark not echoed this long after its audio should have played: heard


class PhoneLine:
    rate = RATE

    def __init__(self, send: Callable[[str], Awaitable[None]], stream_sid: str) -> None:
        self._send = send
        self._stream_sid = stream_sid
        self._codec = MulawCodec(RATE)
        self._clips: collections.deque[Clip] = collections.deque()
        self._unheard: dict[str, tuple[Clip, float]] = {}  # mark name -> clip, due time
        self._names = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.paused = False
        self._next_at = 0.0  # when the audio sent so far has played
        self.echo = EchoReference()  # what the caller hears, for telling its echo apart

    # ---- Playback ---------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return bool(self._clips) or bool(self._unheard)

    def pause(self) -> None:
        """Silence the agent at once (the caller started talking over it; turn-taking judges
        whether it is an interruption): stop sending and ``clear`` what Twilio holds (at most
        ``LEAD_FRAMES``), rewinding the current sentence by that much so that a ``resume``
        loses nothing."""
        if self.paused:
            return
        self.paused = True
        held = int(max(0.0, self._next_at - time.monotonic()) * RATE)
        if not held:
            return
        if self._clips and self._clips[0].pos:
            clip = self._clips[0]
            clip.pos = max(0, clip.pos - held)
        self._spawn_send(twilio.clear(self._stream_sid))

    def resume(self) -> None:
        self.paused = False
        self._wake.set()

    # ---- ClipQueue --------------------------------------------------------------------------
    def enqueue(self, pcm: np.ndarray, on_progress: Callable[[Clip], None] | None = None
                ) -> Clip:
        clip = Clip(np.asarray(pcm, dtype=np.int16), on_progress)
        self._clips.append(clip)
        self._wake.set()
        return clip

    def flush(self) -> bool:
        """Drop what is queued and what Twilio still holds (``clear``); True if the agent was
        speaking or about to."""
        had = self.busy
        while self._clips:
            self._clips.popleft().finish()
        for clip, _ in self._unheard.values():
            clip.finish()
        self._unheard.clear()
        self.paused = False
        if had:
            self._spawn_send(twilio.clear(self._stream_sid))
        return had

    # ---- events from Twilio -------------------------------------------------------------------
    def heard(self, name: str) -> None:
        """Twilio echoed a mark: the sentence before it has been played (or cleared)."""
        entry = self._unheard.pop(name, None)
        if entry is not None:
            entry[0].finish()

    # ---- pacing -----------------------------------------------------------------------------
    async def __aenter__(self) -> PhoneLine:
        self._task = asyncio.create_task(self._run(), name="phone-line")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for clip in self._clips:
            clip.finish()
        self._clips.clear()
        for clip, _ in self._unheard.values():
            clip.finish()
        self._unheard.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        """Send the queued audio in 20 ms frames, ``LEAD_FRAMES`` ahead of real time."""
        self._next_at = next_at = time.monotonic()
        while True:
            self._expire_marks()
            if self.paused or not self._clips:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5 if self._unheard else None):
                        await self._wake.wait()
                next_at = max(next_at, time.monotonic())
                continue
            clip = self._clips[0]
            clip.start()
            # behind real time by more than the lead (the event loop stalled): Twilio's buffer
            # ran dry, and this frame plays when it arrives, not when it was due
            next_at = max(next_at, time.monotonic())
            chunk = clip.pcm[clip.pos:clip.pos + FRAME]
            clip.pos += len(chunk)
            await self._send(twilio.media(self._stream_sid, self._codec.encode(chunk)))
            self.echo.push(chunk, RATE, next_at)
            if clip.on_progress is not None:
                clip.on_progress(clip)
            next_at += len(chunk) / RATE
            self._next_at = next_at
            if clip.pos >= len(clip.pcm) and self._clips and self._clips[0] is clip:
                self._clips.popleft()
                name = f"s{next(self._names)}"
                self._unheard[name] = (clip, next_at + MARK_GRACE_S)
                await self._send(twilio.mark(self._stream_sid, name))
            delay = next_at - time.monotonic() - LEAD_FRAMES * FRAME / RATE
            if delay > 0:
                await asyncio.sleep(delay)

    def _expire_marks(self) -> None:
        """A peer that never echoes marks must not hold a turn open forever."""
        now = time.monotonic()
        for name, (clip, due) in list(self._unheard.items()):
            if now > due:
                log.debug("mark %s not echoed in time: taken as heard", name)
                del self._unheard[name]
                clip.finish()

    def _spawn_send(self, text: str) -> None:
        task = asyncio.ensure_future(self._send(text))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
