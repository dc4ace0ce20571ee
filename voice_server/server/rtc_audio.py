"""The outbound audio track: 48 kHz mono, 20 ms frames, paced in real time, silence when idle;
a ``ClipQueue`` that ``playout.PlayoutSpeechOutput`` feeds sentence by sentence."""

from __future__ import annotations

import asyncio
import collections
import fractions
import time
from collections.abc import Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..pipeline.echo import EchoReference
from .playout import Clip

__all__ = ["OutboundAudioTrack"]

RATE = 48_000
FRAME = RATE // 50  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)


class OutboundAudioTrack(MediaStreamTrack):
    kind = "audio"
    rate = RATE

    def __init__(self) -> None:
        super().__init__()
        self._clips: collections.deque[Clip] = collections.deque()
        self._pts = 0
        self._t0: float | None = None
        self.last_voiced_at: float | None = None
        self.paused = False
        self.echo = EchoReference()  # what went out, for telling the agent's echo apart

    def pause(self) -> None:
        """Send silence without losing our place (ducking under a barge-in candidate)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def enqueue(self, pcm48: np.ndarray,
                on_progress: Callable[[Clip], None] | None = None) -> Clip:
        clip = Clip(np.asarray(pcm48, dtype=np.int16), on_progress)
        self._clips.append(clip)
        return clip

    def flush(self) -> bool:
        """Drop everything queued; True if audio was playing or waiting."""
        had = bool(self._clips)
        while self._clips:
            self._clips.popleft().finish()
        self.paused = False
        return had

    @property
    def busy(self) -> bool:
        return bool(self._clips)

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._t0 is None:
            self._t0 = now
        due = self._t0 + self._pts / RATE
        if due > now:
            await asyncio.sleep(due - now)
        elif now - due > 0.2:  # we fell behind (loop stall): resync instead of bursting
            self._t0 = now - self._pts / RATE
            due = now  # and this frame plays from now: what the echo reference records
        out = np.zeros(FRAME, dtype=np.int16)
        filled = 0
        while filled < FRAME and self._clips and not self.paused:
            clip = self._clips[0]
            clip.start()
            take = min(FRAME - filled, len(clip.pcm) - clip.pos)
            out[filled:filled + take] = clip.pcm[clip.pos:clip.pos + take]
            clip.pos += take
            filled += take
            if clip.on_progress is not None:
                clip.on_progress(clip)
            if clip.pos >= len(clip.pcm):
                self._clips.popleft()
                clip.finish()
        if filled:
            self.last_voiced_at = time.monotonic()
        self.echo.push(out, RATE, due)
        frame = av.AudioFrame.from_ndarray(out.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = TIME_BASE
        self._pts += FRAME
        return frame
