"""Streaming VAD on synthetic and espeak-ng audio: confirmed starts, ends after silence, short
noises ignored, pre-roll kept, chunking-independent."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.pipeline.audio import decode_wav
from voice_server.pipeline.vad import StreamingVAD, VADSettings

RATE = 16000


def silence(s: float) -> np.ndarray:
    return np.zeros(int(RATE * s), dtype=np.int16)


def noise(s: float, level: float = 8000, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(RATE * s)) * level).clip(-32000, 32000).astype(np.int16)


def run(vad: StreamingVAD, pcm: np.ndarray, chunk: int = 960) -> list:
    events = []
    for i in range(0, len(pcm), chunk):
        events += vad.feed(pcm[i:i + chunk])
    return events


@pytest.fixture(scope="module")
def question(make_speech) -> np.ndarray:
    return decode_wav(make_speech("What is the capital of France?", pad=(0, 0)), max_seconds=30)


def test_speech_gives_one_start_and_one_end(question):
    """An utterance between silences: start, then end after the trailing silence, with audio."""
    vad = StreamingVAD()
    pcm = np.concatenate([silence(1), question, silence(1)])
    events = run(vad, pcm)
    assert [e.kind for e in events] == ["start", "end"]
    start, end = events
    loud = np.flatnonzero(np.abs(question) > 500)
    speech_end_s = 1 + loud[-1] / RATE
    assert 1.0 <= start.onset_s <= 1 + loud[0] / RATE + 0.1
    assert speech_end_s + 0.4 <= end.at_s <= speech_end_s + 0.8  # ~500 ms trailing silence
    assert len(end.pcm) >= len(question)  # pre-roll + all speech


@pytest.mark.parametrize("chunk", [160, 441, 960, 4800])
def test_events_do_not_depend_on_chunk_size(question, chunk):
    """Feeding odd-sized chunks gives the same events at the same times."""
    pcm = np.concatenate([silence(0.5), question, silence(1)])
    ref = [(e.kind, e.at_s) for e in run(StreamingVAD(), pcm, 960)]
    assert [(e.kind, e.at_s) for e in run(StreamingVAD(), pcm, chunk)] == ref


def test_short_bursts_are_not_speech():
    """100 ms clicks, even repeated with gaps, never confirm speech."""
    vad = StreamingVAD(VADSettings(aggressiveness=3))
    pcm = np.concatenate([silence(0.5), noise(0.1), silence(0.3), noise(0.1, seed=2),
                          silence(0.5)])
    assert run(vad, pcm) == []


def test_pause_shorter_than_end_silence_does_not_end_the_turn(question):
    """A 400 ms mid-sentence pause keeps one utterance with the default 500 ms end silence."""
    half = len(question) // 2
    pcm = np.concatenate([silence(0.5), question[:half], silence(0.4), question[half:],
                          silence(1)])
    assert [e.kind for e in run(StreamingVAD(), pcm)] == ["start", "end"]


def test_long_pause_ends_the_turn(question):
    """A 1 s pause splits into two utterances."""
    pcm = np.concatenate([silence(0.5), question, silence(1.0), question, silence(1)])
    assert [e.kind for e in run(StreamingVAD(), pcm)] == ["start", "end", "start", "end"]


def test_max_utterance_forces_an_end(question):
    """Speech longer than max_utterance_s is cut into an utterance."""
    vad = StreamingVAD(VADSettings(max_utterance_s=1.0))
    events = run(vad, np.concatenate([question, question]))
    assert events[0].kind == "start" and events[1].kind == "end"
    assert len(events[1].pcm) <= RATE * 1.0 + 960


def test_settings_are_validated():
    """Bad frame sizes and modes are refused early."""
    with pytest.raises(ValueError):
        VADSettings(frame_ms=25)
    with pytest.raises(ValueError):
        VADSettings(aggressiveness=4)
