"""The outbound audio track (48 kHz mono, 20 ms frames, paced in real time, silence when idle)
and the ``SpeechOutput`` that feeds it sentence by sentence."""

from __future__ import annotations

import asyncio
import collections
import fractions
import time
from collections.abc import Awaitable, Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from ..pipeline.audio import resample
from ..pipeline.speech import HeardText
from ..protocol import Message, TTSStart

__all__ = ["OutboundAudioTrack", "RtcSpeechOutput"]

RATE = 48_000
FRAME = RATE // 50  # 20 ms
TIME_BASE = fractions.Fraction(1, RATE)


class _Clip:
    """One sentence queued for playback, with progress events."""

    def __init__(self, pcm: np.ndarray, on_progress: Callable[[_Clip], None] | None) -> None:
        self.pcm = pcm
        self.pos = 0
        self.started = asyncio.Event()
        self.finished = asyncio.Event()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.on_progress = on_progress

    @property
    def fraction(self) -> float:
        return self.pos / len(self.pcm) if len(self.pcm) else 1.0


class OutboundAudioTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._clips: collections.deque[_Clip] = collections.deque()
        self._pts = 0
        self._t0: float | None = None
        self.last_voiced_at: float | None = None
        self.paused = False

    def pause(self) -> None:
        """Send silence without losing our place (ducking under a barge-in candidate)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def enqueue(self, pcm48: np.ndarray,
                on_progress: Callable[[_Clip], None] | None = None) -> _Clip:
        clip = _Clip(np.asarray(pcm48, dtype=np.int16), on_progress)
        self._clips.append(clip)
        return clip

    def flush(self) -> bool:
        """Drop everything queued; True if audio was playing or waiting."""
        had = bool(self._clips)
        while self._clips:
            self._clips.popleft().finished.set()
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
        out = np.zeros(FRAME, dtype=np.int16)
        filled = 0
        while filled < FRAME and self._clips and not self.paused:
            clip = self._clips[0]
            if clip.pos == 0 and not clip.started.is_set():
                clip.started_at = time.monotonic()
                clip.started.set()
            take = min(FRAME - filled, len(clip.pcm) - clip.pos)
            out[filled:filled + take] = clip.pcm[clip.pos:clip.pos + take]
            clip.pos += take
            filled += take
            if clip.on_progress is not None:
                clip.on_progress(clip)
            if clip.pos >= len(clip.pcm):
                self._clips.popleft()
                clip.finished_at = time.monotonic()
                clip.finished.set()
        if filled:
            self.last_voiced_at = time.monotonic()
        frame = av.AudioFrame.from_ndarray(out.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = TIME_BASE
        self._pts += FRAME
        return frame


class RtcSpeechOutput:
    """Plays a turn's sentences on the session's outbound track; knows what was heard."""

    discarded = False

    def __init__(self, track: OutboundAudioTrack, emit: Callable[[Message], Awaitable[None]]
                 ) -> None:
        self._track = track
        self._emit = emit
        self._clips: list[_Clip] = []
        self.heard = HeardText()
        self.first_audio_at: float | None = None
        self.gaps_ms: list[float] = []

    def _progress(self, index: int) -> Callable[[_Clip], None]:
        def update(clip: _Clip) -> None:
            if clip.pos >= len(clip.pcm):
                self.heard.played = max(self.heard.played, index + 1)
                self.heard.fraction = 0.0
            elif self.heard.played == index:
                self.heard.fraction = clip.fraction
        return update

    async def play(self, text: str, pcm: np.ndarray, sample_rate: int) -> None:
        pcm48 = await asyncio.to_thread(resample, pcm, sample_rate, RATE)
        index = len(self.heard.sentences)
        self.heard.sentences.append(text)
        if self._clips and (done := self._clips[-1].finished_at) is not None:
            self.gaps_ms.append(round((time.monotonic() - done) * 1000, 1))  # an underrun
        clip = self._track.enqueue(pcm48, self._progress(index))
        self._clips.append(clip)
        if index == 0:
            await clip.started.wait()  # tts-start when the first sentence starts playing
            self.first_audio_at = clip.started_at
            await self._emit(TTSStart())

    async def drain(self) -> None:
        if self._clips:
            await self._clips[-1].finished.wait()

    def cancel(self) -> bool:
        playing = any(not c.finished.is_set() for c in self._clips)
        self._track.flush()
        return playing
