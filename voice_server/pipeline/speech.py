"""Where synthesized speech goes: the ``SpeechOutput`` interface and the WebSocket fallback.

The turn hands each synthesized sentence to an output. A WebRTC output paces audio on the
outbound track; ``ChunkMessageOutput`` sends ``tts-start`` / ``tts-chunk`` messages
(spec: "tts-chunk — Streaming TTS audio chunk (when WebRTC audio track unavailable)").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import numpy as np

from ..protocol import Message, TTSChunk, TTSStart
from .audio import pcm_to_base64

__all__ = ["ChunkMessageOutput", "HeardText", "HeldOutput", "SpeechOutput"]

Emit = Callable[[Message], Awaitable[None]]


class HeardText:
    """What the listener has heard so far: whole sentences plus a fraction of the current one."""

    def __init__(self) -> None:
        self.sentences: list[str] = []
        self.played: int = 0  # sentences completely played
        self.fraction: float = 0.0  # of the sentence being played

    def text(self) -> str:
        heard = self.sentences[: self.played]
        if self.played < len(self.sentences) and self.fraction > 0:
            words = self.sentences[self.played].split()
            keep = int(len(words) * self.fraction)
            if keep:
                heard = [*heard, " ".join(words[:keep])]
        return " ".join(heard)


class SpeechOutput(Protocol):
    """Receives the sentences of one turn in order."""

    heard: HeardText
    gaps_ms: list[float]  # silences between two pieces because the next was not ready yet
    discarded: bool  # never heard (a speculative answer dropped): leaves no history

    async def play(self, text: str, pcm: np.ndarray, sample_rate: int) -> None:
        """Queue one sentence; the first call of a turn announces ``tts-start``."""
        ...

    async def drain(self) -> None:
        """Return once everything queued has been played (or sent)."""
        ...

    def ahead_s(self) -> float:
        """Seconds of this turn's audio queued and not yet played: how long the listener
        hears speech before silence if nothing more comes."""
        ...

    def cancel(self) -> bool:
        """Barge-in: drop everything not yet played; True if audio was cut."""
        ...


class ChunkMessageOutput:
    """Fallback output: each sentence becomes one ``tts-chunk`` (base64 PCM16 at Piper's rate).

    The client plays each chunk on arrival or after the one before (the reference client and
    our page do), so the turn keeps that clock: it ends, with ``tts-complete`` ("TTS audio
    playback finished", spec), once the client has played what it was sent, and until then the
    user's next utterance cuts it (``tts-cancelled``, spec "Barge-in"; the client stops its
    player) and the history keeps what had been played by then. Ending at the last chunk
    left the reply playing for seconds after the user spoke again, and the next answer queued
    behind it."""

    discarded = False

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._started = False
        self.heard = HeardText()
        self.gaps_ms: list[float] = []  # the client paces playback: gaps are its to see
        self._spans: list[tuple[float, float]] = []  # each sentence's start and end there

    async def play(self, text: str, pcm: np.ndarray, sample_rate: int) -> None:
        if not self._started:
            self._started = True
            await self._emit(TTSStart())
        self.heard.sentences.append(text)
        await self._emit(TTSChunk(format="pcm", sample_rate=sample_rate,
                                  data=pcm_to_base64(pcm)))
        start = max(self._ends_at(), time.monotonic())
        self._spans.append((start, start + len(pcm) / sample_rate))

    async def drain(self) -> None:
        await asyncio.sleep(self.ahead_s())
        self._heard_by(time.monotonic())

    def ahead_s(self) -> float:
        return max(0.0, self._ends_at() - time.monotonic())

    def cancel(self) -> bool:
        self._heard_by(time.monotonic())
        return self._started

    def _ends_at(self) -> float:
        """When the client will have played what it was sent."""
        return self._spans[-1][1] if self._spans else 0.0

    def _heard_by(self, now: float) -> None:
        """What the client has played by ``now``: whole sentences, then part of one."""
        played = sum(1 for _, end in self._spans if end <= now)
        self.heard.played = played
        if played < len(self._spans):
            start, end = self._spans[played]
            self.heard.fraction = max(0.0, min(1.0, (now - start) / max(end - start, 1e-3)))


class HeldOutput:
    """A speculative answer (started on a short pause, docs/turn-taking.md):
    its messages and audio are held until ``commit()`` (the end of turn is confirmed), then
    released in order; ``discard()`` (the user spoke on) drops them unheard."""

    def __init__(self, inner: SpeechOutput, emit: Emit) -> None:
        self._inner = inner
        self._emit = emit
        self._held: list[Message] = []
        self._released = asyncio.Event()
        self.discarded = False

    @property
    def heard(self) -> HeardText:
        return self._inner.heard

    @property
    def gaps_ms(self) -> list[float]:
        return self._inner.gaps_ms

    async def emit(self, message: Message) -> None:
        if self._released.is_set():
            await self._emit(message)
        elif not self.discarded:
            self._held.append(message)

    async def commit(self) -> None:
        while self._held:  # messages emitted meanwhile join the queue, in order
            await self._emit(self._held.pop(0))
        self._released.set()

    def discard(self) -> None:
        self.discarded = True
        self._held.clear()

    async def confirmed(self) -> None:
        """Return once the end of turn is confirmed (``commit``); never, if it is dropped."""
        await self._released.wait()

    async def play(self, text: str, pcm: np.ndarray, sample_rate: int) -> None:
        await self._released.wait()
        await self._inner.play(text, pcm, sample_rate)

    async def drain(self) -> None:
        await self._released.wait()
        await self._inner.drain()

    def ahead_s(self) -> float:
        return self._inner.ahead_s()

    def cancel(self) -> bool:
        return self._inner.cancel() if self._released.is_set() else False
