"""What the speech model hears in a caller's audio, told to their VAD (pipeline/vad.py).

One per listener: it collects the audio into the model's 32 ms chunks, asks the model (Silero
VAD in the end-of-turn model's worker: pipeline/turn_model.py) about each chunk the audio
completes, and carries the model's state from one call to the next. Audio quieter than
``QUIET_DBFS`` is not sent (~0.6 ms of the two processes' CPU a call, 31 calls a second: 2 % of
a core for each caller who is never quiet): the VAD hears it with webrtcvad alone, as in a
quiet room, which it is. The VAD waits for the model on every packet, so a model that fails or
is slow is left alone for a while (webrtcvad alone again), never waited for longer than
``TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

import numpy as np

from ..pipeline.audio import rms
from ..pipeline.speech_model import CHUNK

__all__ = ["SpeechGate", "SpeechModel"]

log = logging.getLogger(__name__)

TIMEOUT_S = 0.05  # a call the VAD waits for longer than this is given up
RETRY_AFTER_S = 5.0  # after a failure, webrtcvad alone for this long
QUIET_DBFS = -50.0  # audio this quiet is no noise to doubt webrtcvad in: not sent
_QUIET = 32768 * 10 ** (QUIET_DBFS / 20)


class SpeechModel(Protocol):
    async def speech(self, pcm: np.ndarray, state: np.ndarray | None
                     ) -> tuple[np.ndarray, np.ndarray]: ...


class SpeechGate:
    def __init__(self, model: SpeechModel) -> None:
        self._model = model
        self._pending = np.zeros(0, dtype=np.int16)
        self._state: np.ndarray | None = None
        self._resting_until = 0.0

    async def hear(self, pcm: np.ndarray) -> list[float] | None:
        """The speech probability of each chunk ``pcm`` completes (16 kHz int16, in order);
        None where the model was not asked (quiet audio) or is unavailable."""
        data = np.concatenate([self._pending, np.asarray(pcm, dtype=np.int16)])
        whole = len(data) - len(data) % CHUNK
        self._pending = data[whole:]
        if not whole:
            return []
        if time.monotonic() < self._resting_until or rms(data[:whole]) < _QUIET:
            self._state = None  # the model starts afresh on the next loud audio
            return None
        try:
            async with asyncio.timeout(TIMEOUT_S):
                probabilities, self._state = await self._model.speech(data[:whole], self._state)
        except Exception as exc:  # noqa: BLE001 - any failure: webrtcvad alone for a while
            log.warning("the VAD's speech model is not answering (%s): webrtcvad alone for "
                        "%.0f s", type(exc).__name__ if isinstance(exc, TimeoutError) else exc,
                        RETRY_AFTER_S)
            self._resting_until = time.monotonic() + RETRY_AFTER_S
            self._state = None
            return None
        return [float(p) for p in probabilities]
