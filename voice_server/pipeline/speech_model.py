"""Silero VAD v5: a model that hears whether audio is speech, where webrtcvad hears noise too.

webrtcvad calls white or pink noise voice from about 10 dB below the voice, so in such a room
the silence after a question is never found and the noise alone starts utterances
(``bench/noise_vad.py``); Silero VAD finds it after every question at 5 dB. The model (ONNX,
2.2 MB, MIT, by Silero) ships in the ``pipecat-ai`` wheel the install already takes for Smart
Turn (``pipecat/audio/vad/data/silero_vad.onnx``); the wheel's publisher is not the model's
author, so the file is checked against its sha256.

Its interface at 16 kHz: 512 new samples at a time (32 ms) with the 64 before them, float in
[-1, 1], and a recurrent state (2, 1, 128) carried from one chunk to the next; out comes the
probability that the chunk is speech. ``SileroVAD`` runs it in the turn model's worker
(turn_model.py: native code never runs in the server's process); the state of each caller's
audio travels with each call as one array (``STATE_SIZE``), so the worker keeps none.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np

__all__ = ["CHUNK", "SILERO_SHA256", "STATE_SIZE", "SileroVAD", "SpeechModelError",
           "default_speech_model", "pipecat_file"]

CHUNK = 512  # samples read at a time, at 16 kHz
_CONTEXT = 64  # samples before each chunk that it reads again
_RNN = (2, 1, 128)
STATE_SIZE = 2 * 128 + _CONTEXT  # the recurrent state, then the context
# silero_vad.onnx as pipecat-ai 1.14.0 ships it
SILERO_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"


class SpeechModelError(Exception):
    """The speech model is missing or not the pinned file."""


def pipecat_file(*parts: str) -> Path | None:
    """A file of the installed ``pipecat-ai`` wheel (None: not there). The package is found,
    never imported (its ``__init__`` needs Pipecat's dependencies)."""
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.is_file() else None


def default_speech_model() -> Path:
    """The Silero VAD file of the installed ``pipecat-ai`` wheel."""
    path = pipecat_file("audio", "vad", "data", "silero_vad.onnx")
    if path is None:
        raise SpeechModelError("the Silero VAD model is missing: pip install --no-deps "
                               "pipecat-ai==1.14.0")
    return path


class SileroVAD:
    """The model on one thread; ``speech`` is pure apart from the model (the state is the
    caller's)."""

    def __init__(self, path: str | Path, sha256: str | None = SILERO_SHA256) -> None:
        import onnxruntime

        data = Path(path).read_bytes()
        if sha256 and hashlib.sha256(data).hexdigest() != sha256:
            raise SpeechModelError(f"{path} is not the pinned Silero VAD file (sha256 differs);"
                                   " reinstall pipecat-ai==1.14.0 --no-deps")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(data, sess_options=options,
                                                     providers=["CPUExecutionProvider"])
        self._rate = np.array(16000, dtype=np.int64)
        probabilities, _state = self.speech(np.zeros(CHUNK, dtype=np.int16), None)  # self-test
        if not 0.0 <= float(probabilities[0]) <= 0.5:
            raise SpeechModelError(f"the speech model heard silence as {probabilities[0]}")

    def speech(self, pcm: np.ndarray, state: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray]:
        """The probability that each ``CHUNK`` of ``pcm`` (16 kHz int16, whole chunks) is
        speech, and the state to pass with the audio that follows (None: a fresh start)."""
        if state is None:
            state = np.zeros(STATE_SIZE, dtype=np.float32)
        rnn = state[:-_CONTEXT].reshape(_RNN).copy()
        context = state[-_CONTEXT:][None].copy()
        audio = np.asarray(pcm, dtype=np.float32) / 32768.0
        out = np.empty(len(audio) // CHUNK, dtype=np.float32)
        for i in range(len(out)):
            chunk = np.concatenate([context, audio[None, i * CHUNK:(i + 1) * CHUNK]], axis=1)
            probability, rnn = self._session.run(None, {"input": chunk, "state": rnn,
                                                        "sr": self._rate})
            context = chunk[:, -_CONTEXT:]
            out[i] = float(np.asarray(probability).ravel()[0])
        return out, np.concatenate([np.asarray(rnn, dtype=np.float32).ravel(), context.ravel()])

    def close(self) -> None:
        self._session = None
