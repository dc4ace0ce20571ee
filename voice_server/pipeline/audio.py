"""Audio helpers: WAV decoding with validation, resampling (PyAV), encoding for the wire.

Internal format: 16 kHz mono int16 numpy arrays for VAD/STT.
"""

from __future__ import annotations

import base64
import binascii
import io
import struct
import wave

import av
import numpy as np

__all__ = [
    "STT_RATE",
    "AudioFormatError",
    "MulawCodec",
    "Resampler",
    "decode_base64_wav",
    "decode_wav",
    "pcm_to_base64",
    "resample",
    "rms",
    "wav_bytes",
]

STT_RATE = 16_000


class AudioFormatError(ValueError):
    """The audio is not something we accept; the message says why (sent as INVALID_AUDIO_FORMAT)."""


class Resampler:
    """Streaming resampler to mono int16 at ``rate`` (wraps PyAV's AudioResampler)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)

    def push_frame(self, frame: av.AudioFrame) -> np.ndarray:
        out = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int16)

    def push(self, pcm: np.ndarray, rate: int, channels: int = 1) -> np.ndarray:
        """Resample interleaved int16 ``pcm`` of ``channels`` channels at ``rate``."""
        if not len(pcm):  # PyAV raises MemoryError for a frame of no samples
            return np.zeros(0, dtype=np.int16)
        layout = "mono" if channels == 1 else "stereo"
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16",
            layout=layout)
        frame.sample_rate = rate
        return self.push_frame(frame)

    def flush(self) -> np.ndarray:
        out = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(None)]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int16)


class MulawCodec:
    """G.711 mu-law <-> int16 PCM (the telephone's 8 kHz audio) with FFmpeg's ``pcm_mulaw``
    codec through PyAV; one per direction of a call (the codec contexts keep no state between
    frames, but are not shared between threads)."""

    def __init__(self, rate: int = 8000) -> None:
        self.rate = rate
        self._decoder = av.CodecContext.create("pcm_mulaw", "r")
        self._decoder.sample_rate = rate
        self._decoder.layout = "mono"
        self._encoder = av.CodecContext.create("pcm_mulaw", "w")
        self._encoder.sample_rate = rate
        self._encoder.format = "s16"
        self._encoder.layout = "mono"

    def decode(self, data: bytes) -> np.ndarray:
        if not data:
            return np.zeros(0, dtype=np.int16)
        frames = self._decoder.decode(av.Packet(data))
        return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.int16)

    def encode(self, pcm: np.ndarray) -> bytes:
        if not len(pcm):
            return b""
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16",
            layout="mono")
        frame.sample_rate = self.rate
        return b"".join(bytes(p) for p in self._encoder.encode(frame))


def resample(pcm: np.ndarray, rate: int, to_rate: int, channels: int = 1) -> np.ndarray:
    """One-shot resample of int16 PCM to mono ``to_rate``."""
    if rate == to_rate and channels == 1:
        return np.asarray(pcm, dtype=np.int16)
    resampler = Resampler(to_rate)
    head = resampler.push(pcm, rate, channels)
    return np.concatenate([head, resampler.flush()])


def decode_wav(data: bytes, *, max_seconds: float, to_rate: int = STT_RATE) -> np.ndarray:
    """Decode a PCM WAV file into mono int16 at ``to_rate``; reject anything else clearly."""
    if len(data) < 44 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioFormatError("audio must be a WAV file (RIFF/WAVE header not found)")
    try:
        with wave.open(io.BytesIO(data), "rb") as wav:
            channels, width, rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
            frames = wav.getnframes()
            if channels not in (1, 2):
                raise AudioFormatError(f"WAV must be mono or stereo, got {channels} channels")
            if width not in (1, 2, 4):
                raise AudioFormatError(f"unsupported WAV sample width: {width * 8} bits")
            if not 8_000 <= rate <= 96_000:
                raise AudioFormatError(f"unsupported WAV sample rate: {rate} Hz")
            if frames == 0:
                raise AudioFormatError("WAV file holds no audio")
            if frames / rate > max_seconds:
                raise AudioFormatError(
                    f"audio is {frames / rate:.1f} s long; the limit is {max_seconds:g} s")
            raw = wav.readframes(frames)
    except AudioFormatError:
        raise
    except (wave.Error, EOFError, struct.error) as exc:
        raise AudioFormatError(f"unsupported or corrupt WAV: {exc}") from None
    except (RuntimeError, OSError, ValueError):  # wave's chunk reader raises a bare
        # RuntimeError when a chunk's declared size runs past the end of the data
        raise AudioFormatError("corrupt WAV: a chunk's size runs past the end of the file") \
            from None
    raw = raw[:len(raw) - len(raw) % width]  # a last partial sample: decode as far as it goes
    if width == 1:
        pcm = ((np.frombuffer(raw, dtype=np.uint8).astype(np.int16) - 128) << 8)
    elif width == 2:
        pcm = np.frombuffer(raw, dtype="<i2")
    else:
        pcm = (np.frombuffer(raw, dtype="<i4") >> 16).astype(np.int16)
    usable = len(pcm) - len(pcm) % channels
    if usable == 0:
        raise AudioFormatError("WAV file holds no audio")
    return resample(pcm[:usable], rate, to_rate, channels)


def decode_base64_wav(data: str, *, max_seconds: float, to_rate: int = STT_RATE) -> np.ndarray:
    if data.startswith("data:"):
        data = data.partition(",")[2]
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise AudioFormatError("audio data is not valid base64") from None
    return decode_wav(raw, max_seconds=max_seconds, to_rate=to_rate)


def pcm_to_base64(pcm: np.ndarray) -> str:
    return base64.b64encode(np.asarray(pcm, dtype="<i2").tobytes()).decode("ascii")


def wav_bytes(pcm: np.ndarray, rate: int) -> bytes:
    """Mono int16 PCM as a WAV file (tests, benchmarks, debugging)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
    return buf.getvalue()


def rms(pcm: np.ndarray) -> float:
    if len(pcm) == 0:
        return 0.0
    return float(np.sqrt(np.mean(np.square(pcm.astype(np.float64)))))


def _quiet_run(pcm: np.ndarray, rate: int, threshold: float, *, from_end: bool) -> int:
    """Samples of whole 10 ms windows below ``threshold`` RMS at the start (or end) of ``pcm``."""
    window = max(1, rate // 100)
    quiet = 0
    while quiet + window <= len(pcm):
        chunk = pcm[len(pcm) - quiet - window:len(pcm) - quiet] if from_end else \
            pcm[quiet:quiet + window]
        if rms(chunk) >= threshold:
            break
        quiet += window
    return quiet


def trim_leading_silence(pcm: np.ndarray, rate: int, *, keep_ms: int = 10,
                         threshold: float = 100.0) -> np.ndarray:
    """Cut the quiet head of synthesized speech to ``keep_ms``: Piper starts a piece with up to
    60 ms of near silence, which the listener of an answer's first piece waits through."""
    start = _quiet_run(pcm, rate, threshold, from_end=False)
    return pcm[max(0, start - rate * keep_ms // 1000):]


def trim_trailing_silence(pcm: np.ndarray, rate: int, *, keep_ms: int = 30,
                          threshold: float = 100.0) -> np.ndarray:
    """Cut the quiet tail of synthesized speech to ``keep_ms`` (a piece that ends mid-sentence
    must flow into the next one without the pause a TTS puts after a sentence)."""
    end = len(pcm) - _quiet_run(pcm, rate, threshold, from_end=True)
    return pcm[:min(len(pcm), end + rate * keep_ms // 1000)]
