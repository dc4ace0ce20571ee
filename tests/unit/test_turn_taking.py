"""Turn-taking quality with the server's default settings (issue 8, "Turn-taking quality"):
a 400 ms mid-sentence pause does not end the turn; clicks, coughs and a short "mm-hm" under
250 ms during agent speech never confirm a barge-in (they only duck the agent for a moment);
a real interruption ducks within ~60-80 ms of its onset; the speculative ``pause`` carries
exactly the audio that ``end`` confirms."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.config import load_settings
from voice_server.pipeline.audio import decode_wav
from voice_server.pipeline.vad import StreamingVAD, VADSettings

RATE = 16000


def server_vad(agent_speaking: bool = False) -> StreamingVAD:
    """A VAD configured exactly as the WebRTC path configures it from default Settings."""
    s = load_settings()
    vad = StreamingVAD(VADSettings(
        aggressiveness=s.vad_aggressiveness, min_speech_ms=s.vad_min_speech_ms,
        end_silence_ms=s.vad_end_silence_ms, pre_roll_ms=s.vad_pre_roll_ms,
        duck_ms=s.vad_duck_ms, barge_in_min_speech_ms=s.vad_barge_in_min_speech_ms,
        spec_silence_ms=s.vad_spec_silence_ms))
    vad.agent_speaking = agent_speaking
    return vad


def silence(s: float) -> np.ndarray:
    return np.zeros(int(RATE * s), dtype=np.int16)


def hum(s: float, f0: float = 120) -> np.ndarray:
    """A voiced, harmonic hum (what "mm" is made of) with 20 ms fades."""
    t = np.arange(int(RATE * s)) / RATE
    x = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 20))
    env = np.minimum(1, np.minimum(t / 0.02, (s - t) / 0.02))
    return (x * env * 6000).astype(np.int16)


def burst(s: float, seed: int, decay: bool) -> np.ndarray:
    """White noise: a click (flat) or a cough (fast attack, exponential decay)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(RATE * s)) / RATE
    env = np.exp(-t / (s / 3)) * np.minimum(1, t / 0.01) if decay else np.ones_like(t)
    return (rng.standard_normal(len(t)) * env * 12000).clip(-32000, 32000).astype(np.int16)


def events(vad: StreamingVAD, pcm: np.ndarray, chunk: int = 960) -> list:
    out = []
    for i in range(0, len(pcm), chunk):
        out += vad.feed(pcm[i:i + chunk])
    return out


def trimmed(wav: bytes) -> np.ndarray:
    pcm = decode_wav(wav, max_seconds=30)
    loud = np.flatnonzero(np.abs(pcm) > 300)
    return pcm[loud[0]:loud[-1] + 1]


@pytest.fixture(scope="module")
def phrases(make_speech) -> tuple[np.ndarray, np.ndarray]:
    return (trimmed(make_speech("I would like to book a table", pad=(0, 0))),
            trimmed(make_speech("for two people tonight", pad=(0, 0))))


@pytest.fixture(scope="module")
def mm_hm(make_speech) -> np.ndarray:
    pcm = trimmed(make_speech("mm-hm", speed=450, pad=(0, 0)))
    assert len(pcm) < 0.3 * RATE  # ~275 ms, fades included (espeak's fastest)
    return pcm


@pytest.mark.parametrize("pause_s", [0.25, 0.4])
def test_mid_sentence_pause_does_not_end_the_turn(phrases, pause_s):
    """Speech, a 400 ms pause, more speech: one start, one end, after the second phrase; the
    speculative pause fired during the gap is superseded (its audio differs from the end's)."""
    first, second = phrases
    pcm = np.concatenate([silence(0.5), first, silence(pause_s), second, silence(1.0)])
    got = events(server_vad(), pcm)
    kinds = [e.kind for e in got if e.kind in ("start", "end")]
    assert kinds == ["start", "end"]
    end = next(e for e in got if e.kind == "end")
    assert end.at_s > 0.5 + (len(first) + len(second)) / RATE + pause_s
    assert len(end.pcm) >= len(first) + len(second)
    s = load_settings()
    head_start = (s.vad_end_silence_ms - s.vad_spec_silence_ms) / 1000  # final pause -> end
    early = [e for e in got if e.kind == "pause" and e.at_s < end.at_s - head_start - 0.05]
    if pause_s >= 0.4:
        assert early  # speculation started in the gap...
    assert all(not np.array_equal(e.pcm, end.pcm) for e in early)  # ...and is not reused


def test_speculative_pause_carries_the_final_utterance(phrases):
    """When the user does not resume, ``pause`` (``vad_spec_silence_ms`` of silence) holds
    exactly the audio ``end`` delivers once ``vad_end_silence_ms`` is reached, so the early
    transcription can be reused as is."""
    first, _ = phrases
    got = [e for e in events(server_vad(), np.concatenate([silence(0.5), first, silence(1.0)]))
           if e.kind != "duck"]
    assert [e.kind for e in got] == ["start", "pause", "end"]
    pause, end = got[1], got[2]
    assert np.array_equal(pause.pcm, end.pcm)
    s = load_settings()
    head_start = (s.vad_end_silence_ms - s.vad_spec_silence_ms) / 1000
    assert head_start - 0.05 <= end.at_s - pause.at_s <= head_start + 0.05


@pytest.mark.parametrize("name, noise", [
    ("click 20 ms", lambda: burst(0.02, 1, decay=False)),
    ("click 100 ms", lambda: burst(0.1, 2, decay=False)),
    ("clicks x3", lambda: np.concatenate([burst(0.06, 3, False), silence(0.3)] * 3)),
    ("cough 150 ms", lambda: burst(0.15, 4, decay=True)),
    ("cough 250 ms", lambda: burst(0.25, 5, decay=True)),
    ("noise 240 ms", lambda: burst(0.24, 6, decay=False)),
    ("hum 240 ms", lambda: hum(0.24)),
    ("mm hm hums", lambda: np.concatenate([hum(0.1), silence(0.04), hum(0.1, 150)])),
])
def test_short_noises_do_not_barge_in(name, noise):
    """Under 250 ms of sound while the agent talks: at most a duck that is then rejected."""
    got = events(server_vad(agent_speaking=True),
                 np.concatenate([silence(0.3), noise(), silence(0.8)]))
    kinds = [e.kind for e in got]
    assert "start" not in kinds, (name, kinds)
    assert kinds.count("duck") == kinds.count("reject"), (name, kinds)


def test_espeak_mm_hm_does_not_barge_in(mm_hm):
    got = events(server_vad(agent_speaking=True),
                 np.concatenate([silence(0.3), mm_hm, silence(0.8)]))
    assert [e.kind for e in got] == ["duck", "reject"]


def test_real_interruption_ducks_fast_then_confirms(phrases):
    """A sentence while the agent talks: duck ~60 ms after onset, confirmed barge-in later."""
    first, _ = phrases
    got = events(server_vad(agent_speaking=True),
                 np.concatenate([silence(0.3), first, silence(1.0)]), chunk=320)
    kinds = [e.kind for e in got]
    assert kinds[:2] == ["duck", "start"], kinds
    duck, start = got[0], got[1]
    assert duck.at_s - duck.onset_s <= 0.1
    assert start.at_s - start.onset_s >= 0.4


def test_agent_idle_keeps_the_short_start_minimum(mm_hm):
    """With the agent silent a short answer ("mm-hm", "yes") still starts a turn at 200 ms."""
    kinds = [e.kind for e in events(server_vad(), np.concatenate([silence(0.3), mm_hm,
                                                                   silence(0.8)]))]
    assert kinds[0] == "duck" and "start" in kinds and "end" in kinds
