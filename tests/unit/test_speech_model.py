"""The VAD's speech model (Silero VAD v5 from the Pipecat wheel, pipeline/speech_model.py) and
what it changes in the VAD (pipeline/vad.py ``model_heard``): nothing in a quiet room; in
steady noise as loud as the voice's 5 dB below, the silence after a question is found, which
webrtcvad alone never finds there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voice_server.pipeline.audio import decode_wav, rms
from voice_server.pipeline.speech_model import (
    CHUNK,
    SileroVAD,
    SpeechModelError,
    default_speech_model,
)
from voice_server.pipeline.vad import StreamingVAD, VADSettings

RATE = 16000


@pytest.fixture(scope="module")
def model() -> SileroVAD:
    return SileroVAD(default_speech_model())


@pytest.fixture(scope="module")
def question(make_speech) -> np.ndarray:
    return decode_wav(make_speech("How many days are in a week?", pad=(0, 0)), max_seconds=30)


def _in_noise(speech: np.ndarray, snr_db: float, before_s: float = 2.0,
              after_s: float = 3.0) -> tuple[np.ndarray, float]:
    """``speech`` in white noise ``snr_db`` below its voiced level, from ``before_s`` before it
    to ``after_s`` after it; and the second its voice ends."""
    loud = np.flatnonzero(np.abs(speech) > 500)
    voiced = speech[loud[0]:loud[-1]].astype(np.float64)
    mix = np.concatenate([np.zeros(int(before_s * RATE)), speech.astype(np.float64),
                          np.zeros(int(after_s * RATE))])
    noise = np.random.default_rng(3).standard_normal(len(mix))
    mix += noise * rms(voiced.astype(np.int16)) / 10 ** (snr_db / 20)
    return np.clip(mix, -32768, 32767).astype(np.int16), before_s + loud[-1] / RATE


def _events(pcm: np.ndarray, model: SileroVAD | None, *, late: int = 0,
            **settings: int) -> list:
    """The VAD's events over ``pcm`` fed 32 ms at a time, each chunk followed by what
    ``model`` heard in it, ``late`` chunks later (as the server's listener tells it: the
    model's view comes once the audio is in, later on a busy machine)."""
    vad = StreamingVAD(VADSettings(spec_silence_ms=60, end_silence_ms=1600, **settings))
    state, events, views = None, [], []
    for i in range(0, len(pcm) - CHUNK + 1, CHUNK):
        chunk = pcm[i:i + CHUNK]
        events += vad.feed(chunk)
        if model is not None:
            probabilities, state = model.speech(chunk, state)
            views.append(float(probabilities[0]))
            if len(views) > late:
                vad.model_heard(views.pop(0))
    return events


def test_the_model_hears_speech_as_speech_and_noise_as_none(model, question):
    silence = np.zeros(RATE, dtype=np.int16)
    noise = (np.random.default_rng(1).standard_normal(RATE) * 3000).astype(np.int16)
    for quiet in (silence, noise):
        probabilities, _ = model.speech(quiet[:len(quiet) - len(quiet) % CHUNK], None)
        assert probabilities.max() < 0.35, probabilities
    speech = question[:len(question) - len(question) % CHUNK]
    probabilities, _ = model.speech(speech, None)
    assert (probabilities >= 0.5).mean() > 0.5, probabilities


def test_the_state_carries_the_audio_across_calls(model, question):
    """Chunks heard in two calls, the state passed between them, are heard as in one call."""
    speech = question[:len(question) - len(question) % CHUNK]
    whole, _ = model.speech(speech, None)
    half = (len(speech) // CHUNK // 2) * CHUNK
    first, state = model.speech(speech[:half], None)
    second, _ = model.speech(speech[half:], state)
    np.testing.assert_allclose(np.concatenate([first, second]), whole, atol=1e-5)


def test_a_file_that_is_not_the_pinned_one_is_refused(tmp_path: Path):
    changed = bytearray(default_speech_model().read_bytes())
    changed[-1] ^= 1
    path = tmp_path / "silero_vad.onnx"
    path.write_bytes(bytes(changed))
    with pytest.raises(SpeechModelError, match="sha256"):
        SileroVAD(path)


def test_in_a_quiet_room_the_model_changes_nothing(model, question):
    """Speech over silence, and over noise 30 dB below it: the same events at the same times
    with the model as without (webrtcvad decides alone, as quick as ever), also when the
    model's view comes 0.3 s or 1 s late (a busy machine): the room is judged on webrtcvad's
    calls on the chunks the model heard, not on the audio at hand (judged so, its late "no
    speech" at each onset made a quiet room noisy and cut a sign-off in two)."""
    for pcm in (np.concatenate([np.zeros(RATE, dtype=np.int16), question,
                                np.zeros(2 * RATE, dtype=np.int16)]),
                _in_noise(question, 30.0)[0]):
        without = [(e.kind, e.at_s) for e in _events(pcm, None)]
        for late in (0, 10, 31):
            assert [(e.kind, e.at_s) for e in _events(pcm, model, late=late)] == without, late
        assert [kind for kind, _ in without] == ["start", "pause", "end"]


def test_in_steady_noise_the_silence_after_a_question_is_found(model, question):
    """White noise 5 dB below the voice (a fan, a road; a phone line has no noise
    suppression): webrtcvad alone hears it all as voice, and the turn would have ended at
    ``max_audio_seconds``; with the model the pause comes within 0.5 s of the voice's end,
    and the noise before the question starts nothing once the room is known to be noisy."""
    pcm, voice_end_s = _in_noise(question, 5.0)
    alone = _events(pcm, None)
    assert not [e for e in alone if e.kind == "pause" and e.at_s > voice_end_s - 0.3], alone
    events = _events(pcm, model)
    pause = next(e for e in events if e.kind == "pause" and e.at_s > voice_end_s - 0.3)
    assert pause.at_s - voice_end_s < 0.5, (pause, voice_end_s)
    starts = [e for e in events if e.kind == "start"]
    assert all(e.at_s < 1.0 or e.at_s > 1.9 for e in starts), starts


def test_the_model_off_is_webrtcvad_alone(model, question):
    pcm, _ = _in_noise(question, 5.0)
    assert [(e.kind, e.at_s) for e in _events(pcm, model, noisy_after_ms=0)] == \
        [(e.kind, e.at_s) for e in _events(pcm, None)]


async def test_the_end_of_turn_model_s_worker_serves_the_speech_model(question):
    """The server's side: Silero runs in the Smart Turn worker (native code never in the
    server's process), its state carried by the caller; without it, asking fails cleanly."""
    from voice_server.compute import ComputePool
    from voice_server.pipeline.turn_model import SmartTurn, TurnModelError

    speech = question[:len(question) - len(question) % CHUNK]
    async with ComputePool(1) as pool:
        turn = SmartTurn(pool)
        await turn.load()
        try:
            probabilities, state = await turn.speech(speech, None)
            assert len(probabilities) == len(speech) // CHUNK
            assert (np.asarray(probabilities) >= 0.5).mean() > 0.5
            more, _ = await turn.speech(np.zeros(CHUNK, dtype=np.int16), state)
            assert len(more) == 1
        finally:
            await turn.aclose()
        without = SmartTurn(pool, speech=False)
        with pytest.raises(TurnModelError):
            await without.speech(speech, None)


class _Counting:
    """A speech model that counts what it is asked, and can hang."""

    def __init__(self, inner: SileroVAD, *, hang_s: float = 0.0) -> None:
        self.inner, self.hang_s, self.asked = inner, hang_s, 0

    async def speech(self, pcm, state):
        import asyncio

        self.asked += 1
        await asyncio.sleep(self.hang_s)
        return self.inner.speech(pcm, state)


async def test_the_gate_never_holds_the_vad_and_asks_about_loud_audio_only(model, question,
                                                                         monkeypatch):
    """The listener's side (server/speech_gate.py): ``hear`` returns at once with what the
    model has heard so far (its view comes late on a busy machine, never the VAD's); quiet
    audio is not sent; a model that fails or hangs past ``TIMEOUT_S`` is left alone for
    ``RETRY_AFTER_S``, webrtcvad deciding alone meanwhile."""
    import asyncio
    import time

    from voice_server.server import speech_gate
    from voice_server.server.speech_gate import SpeechGate

    tasks: list[asyncio.Task] = []

    def spawn(coro, name):
        tasks.append(asyncio.create_task(coro, name=name))
        return tasks[-1]

    async def settled(gate: SpeechGate) -> list:
        await asyncio.gather(*tasks)
        return gate.hear(np.zeros(0, dtype=np.int16))

    counting = _Counting(model)
    gate = SpeechGate(counting, spawn)
    assert gate.hear(np.zeros(320, dtype=np.int16)) == []  # no whole chunk yet
    assert gate.hear(np.zeros(2 * CHUNK, dtype=np.int16)) == []  # nothing heard yet
    assert await settled(gate) == [None, None] and counting.asked == 0  # quiet: not sent
    for i in range(0, len(question) - 320, 320):
        gate.hear(question[i:i + 320])
    heard = await settled(gate)
    assert counting.asked > 0 and max(p for p in heard if p is not None) >= 0.5
    asked = len([p for p in heard if p is not None])  # espeak-ng's silences are quiet: not sent
    assert len(question) // CHUNK // 2 < asked <= len(question) // CHUNK
    fed = 320 + 2 * CHUNK + 320 * len(range(0, len(question) - 320, 320))
    assert len(heard) == fed // CHUNK - 2  # one entry per chunk

    monkeypatch.setattr(speech_gate, "TIMEOUT_S", 0.1)
    hanging = _Counting(model, hang_s=1.0)
    gate = SpeechGate(hanging, spawn)
    started = time.monotonic()
    assert gate.hear(question[:4 * CHUNK]) == []
    assert time.monotonic() - started < 0.05  # not waited for
    assert await settled(gate) == [None] * 4  # given up: one entry per chunk still
    gate.hear(question[4 * CHUNK:8 * CHUNK])  # resting: not asked
    assert await settled(gate) == [None] * 4 and hanging.asked == 1
