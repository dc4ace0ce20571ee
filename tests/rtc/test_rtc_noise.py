"""A caller in steady noise over WebRTC, with a real aiortc peer: the VAD's speech model (Silero
VAD in the end-of-turn model's worker, pipeline/vad.py) finds the silence after the question
in white noise as loud as the voice, where webrtcvad alone hears the noise as voice until it
stops (or ``max_audio_seconds``, 60 s, end the turn): this test fails with
``VOICE_SERVER_VAD_NOISY_AFTER_MS=0`` (the turn ended 13.4 s after the voice, when the noise
did). Through Opus webrtcvad found the silence in this clip at 5 dB below the voice, which it
does not in the same audio unencoded (tests/unit/test_speech_model.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from voice_server.pipeline.audio import decode_wav, resample, rms

pytestmark = pytest.mark.slow

NOISE_BEFORE_S = 2.0
NOISE_AFTER_S = 12.0


def _question_in_noise(make_speech, text: str, snr_db: float) -> tuple[np.ndarray, float]:
    """48 kHz: ``text`` in white noise (made at 16 kHz, the band the server hears) ``snr_db``
    below the voice, from ``NOISE_BEFORE_S`` before it to ``NOISE_AFTER_S`` after it; and the
    seconds from the start to the voice's end."""
    speech = decode_wav(make_speech(text, pad=(0, 0)), max_seconds=30).astype(np.float64)
    loud = np.flatnonzero(np.abs(speech) > 500)
    level = rms(speech[loud[0]:loud[-1]].astype(np.int16))
    mix = np.concatenate([np.zeros(int(NOISE_BEFORE_S * 16000)), speech,
                          np.zeros(int(NOISE_AFTER_S * 16000))])
    mix += np.random.default_rng(5).standard_normal(len(mix)) * level / 10 ** (snr_db / 20)
    pcm = np.clip(mix, -32768, 32767).astype(np.int16)
    return resample(pcm, 16000, 48000), NOISE_BEFORE_S + loud[-1] / 16000


async def test_a_question_in_steady_noise_is_answered_while_the_noise_goes_on(url, rtc_llm,
                                                                           make_speech):
    rtc_llm.script.clear()
    rtc_llm.default_text = "Seven."  # every answer: words the noise made Whisper hear are asked too
    pcm, voice_end_s = _question_in_noise(make_speech, "How many days are in a week?", 0.0)
    async with RtcClient(url) as client:
        await client.negotiate()
        client.mic.enqueue(pcm)
        began = time.monotonic()
        # the noise may start an utterance of its own before the room is known to be noisy
        # (its transcript is empty, and nothing answers it): the question's is the first words
        count, transcript = 0, {"text": ""}
        while not transcript["text"].strip():
            count += 1
            transcript = await client.wait_for("transcript", count=count,
                                               timeout=scaled(NOISE_AFTER_S + 10))
        heard_after_s = time.monotonic() - began - voice_end_s
        try:
            answer = await client.wait_for("llm", timeout=scaled(30))
        finally:
            rtc_llm.default_text = None
    # what Whisper hears in such noise is another matter ("and mandate they are in the lead."
    # for espeak-ng's voice here): the turn is what this test is about
    assert transcript["isFinal"], transcript
    assert answer["text"] == "Seven."
    # the turn ended on the silence after the voice, not when the noise stopped 12 s later
    # (webrtcvad alone: not before); ~1-2 s on an idle 2-core machine
    assert heard_after_s < NOISE_AFTER_S - 4, heard_after_s
