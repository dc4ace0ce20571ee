"""WAV decoding, validation and resampling."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np
import pytest

from voice_server.pipeline.audio import (
    AudioFormatError,
    decode_base64_wav,
    decode_wav,
    resample,
    rms,
    wav_bytes,
)


def wav(pcm: np.ndarray, rate: int, channels: int = 1, width: int = 2) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def tone(rate: int, seconds: float = 1.0, freq: float = 440) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (np.sin(2 * np.pi * freq * t) * 10000).astype("<i2")


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_any_rate_becomes_16k_mono(rate):
    """Mono PCM16 at common rates decodes to 16 kHz with its energy kept."""
    out = decode_wav(wav(tone(rate), rate), max_seconds=5)
    assert abs(len(out) - 16000) <= 400
    assert 6000 < rms(out) < 8000


def test_stereo_and_8bit_and_32bit():
    """Stereo is mixed down; 8- and 32-bit PCM are accepted."""
    stereo = np.repeat(tone(48000), 2)
    assert abs(len(decode_wav(wav(stereo, 48000, channels=2), max_seconds=5)) - 16000) <= 400
    u8 = ((tone(16000).astype(np.int32) >> 8) + 128).astype(np.uint8)
    assert rms(decode_wav(wav(u8, 16000, width=1), max_seconds=5)) > 5000
    i32 = tone(16000).astype(np.int32) << 16
    assert rms(decode_wav(wav(i32, 16000, width=4), max_seconds=5)) > 5000


@pytest.mark.parametrize(("data", "needle"), [
    (b"ID3\x03" + b"\x00" * 100, "WAV"),
    (b"RIFF\x00\x00\x00\x00WAVE" + b"\x00" * 40, "WAV"),
    (wav(np.zeros(0, dtype="<i2"), 16000), "no audio"),
    (wav(tone(16000, 3.0), 16000), "limit"),
    (wav(np.zeros(100, dtype="<i2"), 4000), "sample rate"),
])
def test_bad_wavs_are_refused_clearly(data, needle):
    """Non-WAV, corrupt, empty, too long and odd-rate files raise AudioFormatError."""
    with pytest.raises(AudioFormatError, match=needle):
        decode_wav(data, max_seconds=2)


def test_base64_and_data_uri():
    """Base64 with or without a data: prefix; invalid base64 is refused."""
    data = wav_bytes(tone(16000, 0.5), 16000)
    b64 = base64.b64encode(data).decode()
    assert len(decode_base64_wav(b64, max_seconds=5)) == 8000
    assert len(decode_base64_wav("data:audio/wav;base64," + b64, max_seconds=5)) == 8000
    with pytest.raises(AudioFormatError, match="base64"):
        decode_base64_wav("@@@", max_seconds=5)


def test_resample_round_trip_keeps_length():
    """22.05 kHz -> 48 kHz keeps the duration."""
    out = resample(tone(22050), 22050, 48000)
    assert abs(len(out) - 48000) <= 1000


def test_trailing_silence_is_cut_to_the_kept_tail():
    from voice_server.pipeline.audio import trim_trailing_silence

    rate = 22050
    tone = (np.sin(np.arange(rate // 2) * 0.2) * 8000).astype(np.int16)
    pcm = np.concatenate([tone, np.zeros(rate // 4, dtype=np.int16)])
    out = trim_trailing_silence(pcm, rate, keep_ms=30)
    assert len(tone) <= len(out) <= len(tone) + rate * 40 // 1000
    assert np.array_equal(out[:len(tone)], tone)
    assert len(trim_trailing_silence(np.zeros(100, dtype=np.int16), rate)) <= rate * 30 // 1000


@pytest.mark.parametrize("channels", [1, 2])
def test_a_wav_cut_in_the_middle_of_a_sample_is_decoded_as_far_as_it_goes(channels):
    """Issue 20, bug 3: sample data ending in an odd byte (a file cut short) was an
    INTERNAL_ERROR; it is decoded up to the last whole sample."""
    pcm = np.repeat(tone(16000, 0.5), channels)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(pcm.astype("<i2").tobytes())
    cut = buf.getvalue()[:-1]  # the header still promises the whole data
    decoded = decode_wav(cut, max_seconds=5)
    assert len(decoded) == 8000 - 1
