"""``ArrivalClock``: when inbound audio arrived, by the stream's own clock, whatever the time
the server gets to it (pipeline/arrival.py)."""

from __future__ import annotations

import pytest

from voice_server.pipeline.arrival import MAX_LAG_S, ArrivalClock

FRAME_S = 0.02
RTP = 48_000  # units a second
WRAP = 1 << 32


def test_audio_processed_as_it_comes_arrived_now() -> None:
    clock = ArrivalClock(RTP, wrap=WRAP)
    for i in range(100):
        now = 100.0 + (i + 1) * FRAME_S
        assert clock.heard(FRAME_S, now, i * 960) == pytest.approx(now)


def test_audio_processed_late_keeps_the_time_it_arrived() -> None:
    """50 frames in time, then 1 s of stall, then the queued frames all at once."""
    clock = ArrivalClock(RTP, wrap=WRAP)
    for i in range(50):
        clock.heard(FRAME_S, 100.0 + (i + 1) * FRAME_S, i * 960)
    stalled_until = 100.0 + 51 * FRAME_S + 1.0
    for i in range(50, 101):  # arrived 101.02 ... 102.02, processed at 102.02
        arrived = clock.heard(FRAME_S, stalled_until + (i - 50) * 0.001, i * 960)
        # (within the offset's relaxing, RELAX_PER_S)
        assert arrived == pytest.approx(100.0 + (i + 1) * FRAME_S, abs=0.015)
    assert arrived == pytest.approx(102.02, abs=0.015)


def test_rtp_timestamps_wrap() -> None:
    clock = ArrivalClock(RTP, wrap=WRAP)
    first = WRAP - 5 * 960
    for i in range(10):
        now = 7.0 + (i + 1) * FRAME_S
        assert clock.heard(FRAME_S, now, (first + i * 960) % WRAP) == pytest.approx(now)


def test_lost_packets_are_time_that_passed_not_a_lag() -> None:
    clock = ArrivalClock(RTP, wrap=WRAP)
    clock.heard(FRAME_S, 1.02, 0)
    # five frames lost: the next one starts 120 ms after the first, and arrives in time
    assert clock.heard(FRAME_S, 1.14, 6 * 960) == pytest.approx(1.14)
    # unseen frames (no stamps): counted as they come
    clock_without = ArrivalClock()
    assert clock_without.heard(FRAME_S, 1.02) == pytest.approx(1.02)
    assert clock_without.heard(FRAME_S, 1.04) == pytest.approx(1.04)


def test_a_stamp_that_goes_back_follows_the_last_piece() -> None:
    clock = ArrivalClock(RTP, wrap=WRAP)
    clock.heard(FRAME_S, 5.02, 10 * 960)
    assert clock.heard(FRAME_S, 5.04, 3 * 960) == pytest.approx(5.04)  # a sender's reset
    assert clock.heard(FRAME_S, 5.06, 4 * 960) == pytest.approx(5.06)


def test_a_new_source_leaping_ahead_is_taken_at_once() -> None:
    clock = ArrivalClock(RTP, wrap=WRAP)
    clock.heard(FRAME_S, 5.02, 0)
    assert clock.heard(FRAME_S, 5.04, 1_000_000_000) == pytest.approx(5.04)
    assert clock.heard(FRAME_S, 5.06, 1_000_000_960) == pytest.approx(5.06)


def test_a_lag_beyond_the_limit_starts_over() -> None:
    clock = ArrivalClock()
    clock.heard(FRAME_S, 1.02)
    late = 1.04 + MAX_LAG_S + 1.0  # the next frame seen 6 s after it came: not a lag
    assert clock.heard(FRAME_S, late) == pytest.approx(late)


def test_the_offset_relaxes_with_clock_drift() -> None:
    """The sender's clock runs 0.1 % slow: an hour of audio arrives 3.6 s later than it
    stamps; the estimate follows it within a frame or two."""
    clock = ArrivalClock(RTP, wrap=WRAP)
    now = 0.0
    for i in range(3600 * 50):
        now = (i + 1) * FRAME_S * 1.001
        arrived = clock.heard(FRAME_S, now, (i * 960) % WRAP)
    assert arrived == pytest.approx(now, abs=2 * FRAME_S)
