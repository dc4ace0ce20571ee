"""The agent's echo judged by its audio (pipeline/echo.py): what was played, recorded on its
own clock, explains its echo at any delay (drifting too) through a lossy codec, and does not
explain the user's voice, nor the user talking over the echo."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.pipeline.audio import decode_wav, resample
from voice_server.pipeline.echo import EchoReference, echo_share, without_echo

RATE = 16_000
T0 = 5_000.0  # a monotonic clock reading


@pytest.fixture(scope="module")
def agent48(make_speech) -> np.ndarray:
    wav = make_speech("The weather today is sunny and warm, with a light breeze from the sea. "
                      "The market opens at nine.", rate=48_000, pad=(0.0, 0.0))
    return decode_wav(wav, max_seconds=30, to_rate=48_000)


@pytest.fixture(scope="module")
def user16(make_speech) -> np.ndarray:
    wav = make_speech("Stop. When does the market open? I need to know now.", pad=(0.0, 0.0))
    return decode_wav(wav, max_seconds=30).astype(np.float32)


def _played(agent48: np.ndarray, until: float, *, gap_after_s: float | None = None
            ) -> EchoReference:
    """The agent's audio pushed in 20 ms frames at the times they play, up to ``until``
    (optionally 300 ms of nothing after ``gap_after_s``: a pause)."""
    ref = EchoReference()
    frame = 960
    t = T0
    for i in range(0, len(agent48) - frame + 1, frame):
        if t >= until:
            break
        ref.push(agent48[i:i + frame], 48_000, t)
        t += frame / 48_000
        if gap_after_s is not None and abs(t - T0 - gap_after_s) < 0.01:
            t += 0.3
    return ref


def _echo(agent48: np.ndarray, start_s: float, seconds: float, gain: float) -> np.ndarray:
    """What the microphone picks up of the agent's audio from ``start_s``, scaled by ``gain``
    and roughened as a codec would (a little noise)."""
    a16 = resample(agent48, 48_000, RATE).astype(np.float32)
    part = a16[int(start_s * RATE):int((start_s + seconds) * RATE)] * gain
    return part + np.random.default_rng(1).normal(0, 20 * gain, len(part))


@pytest.mark.parametrize("delay_s", [0.05, 0.3, 0.8])
def test_the_echo_is_explained_at_any_delay(agent48, delay_s):
    heard_at = T0 + 2.0 + 0.6 + delay_s  # the echo of [2.0, 2.6) s ends arriving then
    ref = _played(agent48, heard_at)
    share = echo_share(_echo(agent48, 2.0, 0.6, 0.1), ref.recent(1.0 + 0.6, heard_at))
    assert share > 0.8, share


def test_a_drifting_delay_is_followed(agent48):
    """The client's playout delay grows by 40 ms in the middle of the window."""
    ref = _played(agent48, T0 + 2.74)
    first = _echo(agent48, 2.0, 0.3, 0.3)
    second = _echo(agent48, 2.3 - 0.04, 0.3, 0.3)  # repeats 40 ms: the delay grew
    heard_at = T0 + 2.6 + 0.1 + 0.04
    share = echo_share(np.concatenate([first, second]), ref.recent(1.6, heard_at))
    assert share > 0.7, share


def test_a_pause_in_the_playout_is_silence_in_the_reference(agent48):
    ref = _played(agent48, T0 + 1.5, gap_after_s=1.0)
    window = ref.recent(0.3, T0 + 1.3)  # within the 300 ms of nothing
    assert not window.any()
    after = ref.recent(0.2, T0 + 1.5)
    assert after.any()


def test_the_users_voice_is_not_echo(agent48, user16):
    heard_at = T0 + 2.6
    ref = _played(agent48, heard_at)
    assert echo_share(user16[:int(0.6 * RATE)], ref.recent(1.6, heard_at)) < 0.2


def test_the_user_talking_over_the_echo_is_not_echo(agent48, user16):
    heard_at = T0 + 2.6 + 0.1
    ref = _played(agent48, heard_at)
    mixed = _echo(agent48, 2.0, 0.6, 0.316) + user16[:int(0.6 * RATE)]  # echo at -10 dB
    assert echo_share(mixed, ref.recent(1.6, heard_at)) < 0.3


def test_nothing_played_explains_nothing(user16):
    ref = EchoReference()
    assert not ref.recent(1.0, T0).any()
    assert echo_share(user16[:RATE], ref.recent(2.0, T0)) == 0.0
    assert echo_share(np.zeros(RATE), np.zeros(2 * RATE)) == 0.0


@pytest.mark.parametrize("gain", [0.1, 0.316])
def test_the_echo_is_taken_out_of_the_users_voice(agent48, user16, gain):
    """The echo alone for 0.6 s, then the user talking over it (-20 and -10 dB): what is left
    is nearer their voice alone by more than 6 dB, so speech to text hears them and not the
    agent; the echo alone is silenced."""
    heard_at = T0 + 2.0 + 1.2 + 0.1
    ref = _played(agent48, heard_at)
    echo = _echo(agent48, 2.0, 1.2, gain)
    user = np.concatenate([np.zeros(int(0.6 * RATE)), user16[:int(0.6 * RATE)]])
    left = without_echo(echo + user, ref.recent(1.0 + 1.2, heard_at)).astype(np.float64)
    before, after = float(echo @ echo), float((left - user) @ (left - user))
    assert after < before / 4, (before, after)
    assert not left[:int(0.4 * RATE)].any()


def test_without_echo_to_find_nothing_is_taken_out(agent48, user16):
    heard_at = T0 + 2.6
    ref = _played(agent48, heard_at)
    user = user16[:RATE]
    left = without_echo(user, ref.recent(2.0, heard_at))
    assert np.array_equal(left, np.round(user).astype(np.int16))
