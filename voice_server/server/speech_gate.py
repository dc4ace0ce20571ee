"""What the speech model hears in a caller's audio, told to their VAD (pipeline/vad.py).

One per listener: it collects the audio into the model's 32 ms chunks and has the model (Silero
VAD in the end-of-turn model's worker: pipeline/turn_model.py) hear them in order, in a task of
its own, carrying the model's state from one call to the next. The VAD never waits for it: each
packet takes what the model has heard since the last (``hear``), so on a busy machine the
model's view comes late, never the VAD's (waiting up to 50 ms a packet, the first version gave
up under the test suite's load and left a noisy room to webrtcvad); the VAD judges the room on
webrtcvad's calls on the same chunks as the model's, so a late view never makes a quiet room
noisy (the first view applied to the audio at hand did, on a busy machine). Audio quieter than
``QUIET_DBFS`` is not sent (~0.6 ms of the two processes' CPU a call, 31 calls a second: 2 % of
a core for each caller who is never quiet): the VAD hears it with webrtcvad alone, as in a
quiet room, which it is. A model that fails is left alone for ``RETRY_AFTER_S`` (webrtcvad
alone again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import numpy as np

from ..pipeline.audio import rms
from ..pipeline.speech_model import CHUNK

__all__ = ["SpeechGate", "SpeechModel"]

log = logging.getLogger(__name__)

TIMEOUT_S = 2.0  # a call that takes longer has failed
RETRY_AFTER_S = 5.0  # after a failure, webrtcvad alone for this long
QUIET_DBFS = -50.0  # audio this quiet is no noise to doubt webrtcvad in: not sent
_QUIET = 32768 * 10 ** (QUIET_DBFS / 20)


class SpeechModel(Protocol):
    async def speech(self, pcm: np.ndarray, state: np.ndarray | None
                     ) -> tuple[np.ndarray, np.ndarray]: ...


class SpeechGate:
    def __init__(self, model: SpeechModel,
                 spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[Any]]) -> None:
        self._model = model
        self._spawn = spawn  # the listener's: its tasks end with it
        self._pending = np.zeros(0, dtype=np.int16)
        self._queue: list[tuple[np.ndarray, bool]] = []  # chunks to hear in order, and loud?
        self._heard: list[float | None] = []  # what the VAD has not been told yet
        self._state: np.ndarray | None = None
        self._resting_until = 0.0
        self._task: asyncio.Task[Any] | None = None

    def hear(self, pcm: np.ndarray) -> list[float | None]:
        """Queue the chunks ``pcm`` completes (16 kHz int16, in order) and return what the
        model heard since the last call, one entry per chunk in order: its speech
        probability, or None where it was not asked (quiet audio, or the model unavailable)."""
        data = np.concatenate([self._pending, np.asarray(pcm, dtype=np.int16)])
        whole = len(data) - len(data) % CHUNK
        self._pending = data[whole:]
        if whole:
            self._queue.append((data[:whole], rms(data[:whole]) >= _QUIET))
            if self._task is None or self._task.done():
                self._task = self._spawn(self._run(), "speech-model")
        heard, self._heard = self._heard, []
        return heard

    async def _run(self) -> None:
        while self._queue:
            audio, loud = self._queue.pop(0)
            if not loud or time.monotonic() < self._resting_until:
                self._state = None  # the model starts afresh on the next loud audio
                self._heard.extend([None] * (len(audio) // CHUNK))
                continue
            batch = [audio]
            while self._queue and self._queue[0][1]:
                batch.append(self._queue.pop(0)[0])  # what came meanwhile, in one call
            self._heard.extend(await self._ask(np.concatenate(batch)))

    async def _ask(self, audio: np.ndarray) -> list[float | None]:
        try:
            async with asyncio.timeout(TIMEOUT_S):
                probabilities, self._state = await self._model.speech(audio, self._state)
        except Exception as exc:  # noqa: BLE001 - any failure: webrtcvad alone for a while
            log.warning("the VAD's speech model failed (%s): webrtcvad alone for %.0f s",
                        type(exc).__name__ if isinstance(exc, TimeoutError) else exc,
                        RETRY_AFTER_S)
            self._resting_until = time.monotonic() + RETRY_AFTER_S
            self._state = None
            return [None] * (len(audio) // CHUNK)
        return [float(p) for p in probabilities]
