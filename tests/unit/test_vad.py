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


def _events(pcm: np.ndarray, settings: VADSettings, *, agent_speaking: bool = False) -> list:
    vad = StreamingVAD(settings)
    vad.agent_speaking = agent_speaking
    return run(vad, pcm)


def _silence_counted_from(events: list, pcm: np.ndarray, settings: VADSettings,
                          loud: float) -> float:
    """ms after the last loud sample at which the VAD started counting silence (from the
    ``pause`` event: emitted after ``spec_silence_ms`` of it)."""
    pause = next(e for e in events if e.kind == "pause")
    last_loud = np.flatnonzero(np.abs(pcm) > loud)[-1] / RATE
    return (pause.at_s - last_loud) * 1000 - settings.spec_silence_ms


@pytest.mark.parametrize("level", [1.0, 0.1])
def test_silence_counts_from_the_end_of_the_voice_not_webrtcvads_hangover(question, level):
    """webrtcvad calls frames voiced for ~100 ms after the voice stops, even over digital
    silence; the quiet-tail rule counts them as silence, for a loud and a soft (-20 dB)
    speaker alike (the floor is relative to the speech's own level). The utterance keeps the
    120 ms after the voice that a speculative pause has, the same at pause and end."""
    pcm = (np.concatenate([silence(1), question, silence(2)]) * level).astype(np.int16)
    on = VADSettings(end_silence_ms=1600, spec_silence_ms=120)
    off = VADSettings(end_silence_ms=1600, spec_silence_ms=120, quiet_below_db=0)
    loud = 500 * level
    assert _silence_counted_from(_events(pcm, off), pcm, off, loud) >= 80  # the hangover
    events = _events(pcm, on)
    assert _silence_counted_from(events, pcm, on, loud) <= 40  # two 20 ms frames at most
    pause = next(e for e in events if e.kind == "pause")
    ends = [e for e in events if e.kind == "end"]
    assert len(ends) == 1 and np.array_equal(pause.pcm, ends[0].pcm)
    tail_ms = (len(pause.pcm) - np.flatnonzero(np.abs(pause.pcm) > loud)[-1]) / RATE * 1e3
    assert 120 <= tail_ms <= 160, tail_ms


def test_an_earlier_pause_pads_the_same_tail_with_digital_silence(question):
    """A pause at 60 ms carries the 60 ms heard after the voice, then 60 ms of zeros: the
    same length as a pause at 120 ms (speech to text hears the same), the room's sound where
    there was time to hear it, and the end carries exactly the pause's audio."""
    pcm = np.concatenate([silence(1), question, silence(3)])
    pcm = pcm + noise(len(pcm) / RATE, level=30, seed=3)  # a quiet room, never voice
    early = _events(pcm, VADSettings(end_silence_ms=1600, spec_silence_ms=60))
    late = _events(pcm, VADSettings(end_silence_ms=1600, spec_silence_ms=120))
    pause = [e for e in early if e.kind == "pause"][-1]
    end = next(e for e in early if e.kind == "end")
    assert np.array_equal(pause.pcm, end.pcm)
    assert len(end.pcm) == len(next(e for e in late if e.kind == "end").pcm)
    heard = RATE * 60 // 1000
    assert not end.pcm[-heard:].any()  # padded
    assert np.count_nonzero(end.pcm[-2 * heard:-heard]) > heard // 2  # the room, as heard
    assert pause.at_s < [e for e in late if e.kind == "pause"][-1].at_s


def test_over_the_agent_silence_counts_as_webrtcvad_says_and_the_audio_ends_alike(question):
    """An utterance that starts while the agent speaks may carry its echo: the pause waits out
    webrtcvad's hangover as before; its audio still ends 120-160 ms after the voice, and the
    end carries the audio of the pause (the speculation is reused)."""
    pcm = np.concatenate([silence(1), question, silence(2)])
    settings = VADSettings(end_silence_ms=1600, spec_silence_ms=120)
    events = _events(pcm, settings, agent_speaking=True)
    assert _silence_counted_from(events, pcm, settings, 500) >= 80
    pause = next(e for e in events if e.kind == "pause")
    end = next(e for e in events if e.kind == "end")
    assert np.array_equal(pause.pcm, end.pcm)
    tail_ms = (len(pause.pcm) - np.flatnonzero(np.abs(pause.pcm) > 500)[-1]) / RATE * 1e3
    assert 120 <= tail_ms <= 160, tail_ms


def test_forget_before_drops_the_start_of_the_utterance(question):
    """The owner can drop what it knows is not the speaker's (the agent's echo before the
    user spoke over it): the utterance's audio then starts there, and still ends 120-160 ms
    after the voice."""
    pcm = np.concatenate([silence(1), question, silence(2)])
    vad = StreamingVAD(VADSettings(end_silence_ms=600))
    events = run(vad, pcm[:RATE * 2])
    assert [e.kind for e in events] == ["start"]
    before = vad.utterance_samples
    vad.forget_before(RATE // 2)
    assert vad.utterance_samples == before - RATE // 2
    end = next(e for e in run(vad, pcm[RATE * 2:]) if e.kind == "end")
    whole = next(e for e in run(StreamingVAD(VADSettings(end_silence_ms=600)), pcm)
                 if e.kind == "end")
    assert np.array_equal(end.pcm, whole.pcm[RATE // 2:])


def test_replace_start_puts_the_cleaned_audio_in_the_utterance(question):
    """The owner takes the agent's echo out of the utterance so far (barge_in_judge.py): the
    utterance, and the end's audio, then carry the cleaned start and what followed as heard."""
    pcm = np.concatenate([silence(1), question, silence(2)])
    vad = StreamingVAD(VADSettings(end_silence_ms=600))
    run(vad, pcm[:RATE * 2])
    so_far = vad.utterance_so_far()
    cleaned = (so_far // 2).astype(np.int16)
    vad.replace_start(cleaned)
    assert np.array_equal(vad.utterance_so_far(), cleaned)
    end = next(e for e in run(vad, pcm[RATE * 2:]) if e.kind == "end")
    whole = next(e for e in run(StreamingVAD(VADSettings(end_silence_ms=600)), pcm)
                 if e.kind == "end")
    assert np.array_equal(end.pcm[:len(cleaned)], cleaned)
    assert np.array_equal(end.pcm[len(cleaned):], whole.pcm[len(cleaned):])


def test_the_settings_make_the_server_s_vad_and_a_stage_overrides_them():
    """``VADSettings.from_settings``, for the listener and the noise benchmark alike: a
    stage's values replace the defaults (None and unknown keys do not); with a speculative
    pause the VAD waits for the longest end of turn (the verdict ends the turn sooner)."""
    from voice_server.config import load_settings

    s = load_settings(vad_spec_silence_ms=200, end_of_turn_max_ms=1600, vad_end_silence_ms=500,
                      vad_noisy_after_ms=400)
    vad = VADSettings.from_settings(s)
    assert (vad.end_silence_ms, vad.spec_silence_ms, vad.noisy_after_ms) == (1600, 200, 400)
    assert vad.max_utterance_s == s.max_audio_seconds
    stage = VADSettings.from_settings(s, {"end_silence_ms": 2500, "min_speech_ms": None,
                                          "aggressiveness": 3, "colour": "blue"})
    assert (stage.end_silence_ms, stage.min_speech_ms, stage.aggressiveness) == \
        (2500, s.vad_min_speech_ms, 3)
    plain = VADSettings.from_settings(load_settings(vad_spec_silence_ms=0,
                                                    vad_end_silence_ms=700))
    assert plain.end_silence_ms == 700
