"""Speech queued for playout on a transport's outbound audio, sentence by sentence, knowing
what the listener has heard: the WebRTC track (rtc_audio.py) and the phone line
(phone_line.py) both hold ``Clip``s and ``PlayoutSpeechOutput`` feeds either."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import numpy as np

from ..pipeline.audio import resample
from ..pipeline.speech import HeardText
from ..protocol import Message, TTSStart

__all__ = ["Clip", "ClipQueue", "PlayoutSpeechOutput"]


class Clip:
    """One sentence queued for playback (int16 PCM at the queue's rate), with progress.
    ``started`` is set when its first sample goes out, ``finished`` once it has been heard
    (or dropped)."""

    def __init__(self, pcm: np.ndarray, on_progress: Callable[[Clip], None] | None) -> None:
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

    def start(self) -> None:
        if not self.started.is_set():
            self.started_at = time.monotonic()
            self.started.set()

    def finish(self) -> None:
        if not self.finished.is_set():
            self.finished_at = time.monotonic()
            self.finished.set()


class ClipQueue(Protocol):
    """A transport's outbound audio as a queue of clips at ``rate``."""

    rate: int

    def enqueue(self, pcm: np.ndarray, on_progress: Callable[[Clip], None] | None = None
                ) -> Clip: ...

    def flush(self) -> bool: ...


class PlayoutSpeechOutput:
    """Plays a turn's sentences on a ``ClipQueue``; ``tts-start`` when the first one starts;
    ``heard`` follows what was played."""

    discarded = False

    def __init__(self, queue: ClipQueue, emit: Callable[[Message], Awaitable[None]]) -> None:
        self._queue = queue
        self._emit = emit
        self._clips: list[Clip] = []
        self.heard = HeardText()
        self.first_audio_at: float | None = None
        self.gaps_ms: list[float] = []

    def _progress(self, index: int) -> Callable[[Clip], None]:
        def update(clip: Clip) -> None:
            if clip.pos >= len(clip.pcm):
                self.heard.played = max(self.heard.played, index + 1)
                self.heard.fraction = 0.0
            elif self.heard.played == index:
                self.heard.fraction = clip.fraction
        return update

    async def play(self, text: str, pcm: np.ndarray, sample_rate: int) -> None:
        out = await asyncio.to_thread(resample, pcm, sample_rate, self._queue.rate)
        index = len(self.heard.sentences)
        self.heard.sentences.append(text)
        if self._clips and (done := self._clips[-1].finished_at) is not None:
            self.gaps_ms.append(round((time.monotonic() - done) * 1000, 1))  # an underrun
        clip = self._queue.enqueue(out, self._progress(index))
        self._clips.append(clip)
        if index == 0:
            await clip.started.wait()  # tts-start when the first sentence starts playing
            self.first_audio_at = clip.started_at
            await self._emit(TTSStart())

    async def drain(self) -> None:
        if self._clips:
            await self._clips[-1].finished.wait()

    def ahead_s(self) -> float:
        samples = sum(len(c.pcm) - c.pos for c in self._clips if not c.finished.is_set())
        return samples / self._queue.rate

    def cancel(self) -> bool:
        playing = any(not c.finished.is_set() for c in self._clips)
        self._queue.flush()
        return playing
