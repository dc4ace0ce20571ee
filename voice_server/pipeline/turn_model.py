"""Smart Turn v3.2: an audio model that says whether the speaker has finished their turn.

The model (CPU ONNX, about 8.7 MB, BSD-2-Clause, by Daily, the authors of Pipecat) ships in the
``pipecat-ai`` wheel (1.14.0) at ``pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx``;
``make install`` installs that wheel with ``--no-deps`` for the file alone (nothing of Pipecat
is imported). Its model card: 16 kHz mono, the last 8 s of the turn (zero-padded at the start
when shorter), waveform normalized to zero mean and unit variance, Whisper's 80-bin log-mel
features (400-sample window, hop 160: 800 frames) as ``input_features`` (batch, 80, 800); the
output is the probability (sigmoid) that the turn is complete.

``SmartTurnService`` runs it in a supervised worker process like the other models (workers/): a
crash in onnxruntime fails that decision, never the server, and the turn falls back to the
fixed silence. ``SmartTurn`` is the server's side, admitted by the compute pool as urgent work.
The same worker runs the speech model of the voice activity detection (speech_model.py), whose
calls are not admitted: 0.2 ms of work per 32 ms of a caller's audio, asked beside the VAD
(which never waits for it: server/speech_gate.py).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..compute import ComputePool
from ..workers import ServiceSpec, WorkerError
from .audio import STT_RATE
from .pooled import PooledModel, PooledWorker
from .speech_model import (
    SILERO_SHA256,
    SileroVAD,
    SpeechModelError,
    default_speech_model,
    pipecat_file,
)
from .vad import KEEP_SILENCE_MS

__all__ = ["SMART_TURN_SHA256", "SmartTurn", "SmartTurnService", "TurnModelError",
           "default_turn_model"]

log = logging.getLogger(__name__)

WINDOW = 8 * STT_RATE
HEARD_SILENCE_MS = 200  # silence after the voice that the model hears (see features())
EXTRA_SILENCE = STT_RATE * (HEARD_SILENCE_MS - KEEP_SILENCE_MS) // 1000  # beyond the VAD's
# the file in pipecat-ai 1.14.0; the wheel's publisher is the model's author, the pin guards
# against a different file under the same name
SMART_TURN_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"


class TurnModelError(Exception):
    """The end-of-turn model failed; the turn falls back to the fixed silence."""


def default_turn_model() -> Path:
    """The bundled Smart Turn file, or ``TurnModelError`` naming the package to install."""
    path = pipecat_file("audio", "turn", "smart_turn", "data", "smart-turn-v3.2-cpu.onnx")
    if path is None:
        raise TurnModelError("the Smart Turn model is missing: pip install --no-deps "
                             "pipecat-ai==1.14.0 (or set VOICE_SERVER_END_OF_TURN_MODEL=off)")
    return path


def features(pcm: np.ndarray, extractor: Callable[..., np.ndarray]) -> np.ndarray:
    """The model's input for 16 kHz int16 (or float) audio: (1, 80, 800) float32.

    ``pcm`` is an utterance as the VAD gives it, with 120 ms of silence after the voice
    (vad.KEEP_SILENCE_MS); the model hears ``EXTRA_SILENCE`` more, ``HEARD_SILENCE_MS`` in
    all. Its figure moves with the length of that silence (espeak-ng's "What is the capital
    of France?" 0.86 with 100 ms, 0.56 with 150, 0.97 with 200), and our thresholds were set
    on about 200 ms: what the utterance kept when its end was counted from webrtcvad's
    hangover (vad.py)."""
    audio = np.asarray(pcm, dtype=np.float32)
    if np.issubdtype(np.asarray(pcm).dtype, np.integer):
        audio = audio / 32768.0
    audio = np.concatenate([audio, np.zeros(EXTRA_SILENCE, dtype=np.float32)])[-WINDOW:]
    audio = np.pad(audio, (WINDOW - len(audio), 0))
    audio = (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)
    mel = extractor(audio, padding=0)[:, :WINDOW // 160]
    return np.ascontiguousarray(mel[None], dtype=np.float32)


class SmartTurnService:
    """The model, loaded once in its worker process and checked with one pass."""

    def __init__(self, *, model: str, threads: int = 1, sha256: str | None = None,
                 speech_model: str | None = None, speech_sha256: str | None = None) -> None:
        import onnxruntime
        from faster_whisper.feature_extractor import FeatureExtractor

        path = Path(model)
        if not path.is_file():
            raise TurnModelError(f"no end-of-turn model at {path}")
        if sha256 and hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
            raise TurnModelError(f"{path} is not the pinned Smart Turn v3.2 file (sha256 differs);"
                                 " reinstall pipecat-ai==1.14.0 --no-deps")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(str(path), sess_options=options,
                                                     providers=["CPUExecutionProvider"])
        self._extractor = FeatureExtractor(feature_size=80)
        self.model_ref = str(path)
        probability = self.complete(np.zeros(STT_RATE, dtype=np.int16))  # self-test, and warm
        if not 0.0 <= probability <= 1.0:
            raise TurnModelError(f"the end-of-turn model's self-test gave {probability}")
        try:
            self._speech = SileroVAD(speech_model, speech_sha256) if speech_model else None
        except SpeechModelError as exc:
            raise TurnModelError(str(exc)) from exc

    def info(self) -> dict[str, Any]:
        return {"model": self.model_ref}

    def close(self) -> None:
        self._session = None
        if self._speech is not None:
            self._speech.close()

    def speech(self, pcm: np.ndarray, state: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray]:
        """``SileroVAD.speech`` (speech_model.py)."""
        if self._speech is None:
            raise TurnModelError("this worker runs no speech model")
        return self._speech.speech(pcm, state)

    def complete(self, pcm: np.ndarray) -> float:
        """Probability that the turn in ``pcm`` (16 kHz, ending now) is complete."""
        out = self._session.run(None, {"input_features": features(pcm, self._extractor)})
        return float(np.asarray(out[0]).ravel()[0])


class SmartTurn(PooledModel):
    """End-of-turn probabilities from the turn-model worker, admitted by the compute pool."""

    name = "smart-turn-v3.2"

    def __init__(self, pool: ComputePool, *, model: str | None = None, speech: bool = True,
                 on_restart: Callable[[str], None] | None = None) -> None:
        """``speech``: the worker runs the speech model of the VAD too (``speech``)."""
        self.model_ref = model or str(default_turn_model())
        self.speech_model: str | None = None
        if speech:
            try:
                self.speech_model = str(default_speech_model())
            except SpeechModelError as exc:  # webrtcvad alone hears the voice, as before
                log.warning("%s; the VAD hears noise as voice", exc)
        spec = ServiceSpec(f"{__name__}:SmartTurnService", {
            "model": self.model_ref, "threads": 1,
            "sha256": None if model else SMART_TURN_SHA256,
            "speech_model": self.speech_model, "speech_sha256": SILERO_SHA256})
        super().__init__(PooledWorker("turn", spec, pool, error=TurnModelError,
                                      what="end-of-turn model", on_restart=on_restart),
                         {"model": self.model_ref})

    async def complete(self, pcm: np.ndarray) -> float:
        """Probability that the turn in ``pcm`` is complete (``TurnModelError`` on failure)."""
        return await self._models.call("complete", pcm, urgent=True)

    async def speech(self, pcm: np.ndarray, state: np.ndarray | None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Silero's speech probabilities for whole chunks of a caller's audio, and the state
        that goes with the next (speech_model.py), outside the compute pool (module
        docstring); ``TurnModelError`` on failure or without a speech model."""
        if self.speech_model is None:
            raise TurnModelError("no speech model")
        try:
            return await self.worker.call("speech", pcm, state)
        except WorkerError as exc:
            raise TurnModelError(f"the speech model failed: {exc}") from exc
