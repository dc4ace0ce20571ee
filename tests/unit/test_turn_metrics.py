"""The ``turn-metrics`` extension message built from a turn's record (issue 22, item 2)."""

from __future__ import annotations

import pytest

from voice_server.metrics import TurnRecord
from voice_server.server.conversation import _turn_metrics


def test_turn_metrics_never_report_negative_steps() -> None:
    """Speech-to-text run speculatively in the pause is done before the end of speech is
    confirmed: the client is told 0 ms, not a negative figure."""
    record = TurnRecord(session_id="s", started=10.0)
    record.stt_done, record.speech_end = 10.0, 10.15  # STT finished 150 ms before confirmation
    record.llm_first_token, record.first_audio, record.finished = 10.1, 10.3, 11.0
    figures = _turn_metrics(record)
    assert figures.stt_ms == 0.0 and figures.first_audio_ms == pytest.approx(150.0)
    assert figures.llm_ttft_ms == pytest.approx(100.0) and figures.total_ms == pytest.approx(850)


def test_a_held_answer_to_unfinished_words_keeps_its_steps_apart() -> None:
    """Words that stop mid-sentence go to the LLM after a longer silence (listening.py): speech
    to text still counts until its words, the LLM from its request, and the wait is neither
    STT, LLM nor overhead."""
    record = TurnRecord(session_id="s", started=11.6)
    record.speech_end, record.stt_done = 10.0, 10.1
    record.words_held_until, record.llm_requested = 11.0, 11.0005
    record.llm_first_token, record.first_chunk, record.tts_synth_start = 11.2, 11.3, 11.3
    record.tts_synth_done, record.first_audio = 11.4, 11.41
    summary = record.summary()
    assert summary["stt_ms"] == pytest.approx(100.0)
    assert summary["llm_ttft_ms"] == pytest.approx(199.5)
    assert summary["overhead_ms"] == pytest.approx(10.5)


def test_prometheus_counts_every_outcome_from_zero() -> None:
    """``voice_turns_total`` has every outcome from the start (a rate of 0 can be graphed), and
    a turn taken back is counted as that, not as the interruption that took it back."""
    from voice_server.metrics import TURN_OUTCOMES, Metrics

    metrics = Metrics()

    def count(outcome: str) -> float | None:
        return metrics.registry.get_sample_value("voice_turns_total", {"outcome": outcome})

    assert {o: count(o) for o in TURN_OUTCOMES} == dict.fromkeys(TURN_OUTCOMES, 0.0)
    records = [TurnRecord(session_id="s", interrupted=True, taken_back=True,
                          turn_decision="complete"),
               TurnRecord(session_id="s", interrupted=True),
               TurnRecord(session_id="s", interrupted=True, error="LLM_ERROR"),
               TurnRecord(session_id="s")]
    for record in records:
        metrics.record_turn(record)
    assert {o: count(o) for o in TURN_OUTCOMES} == dict.fromkeys(TURN_OUTCOMES, 1.0)
    # and which decision ended it too soon
    assert metrics.registry.get_sample_value(
        "voice_turns_taken_back_total", {"reason": "complete"}) == 1.0
    assert metrics.taken_back_by_reason() == {"complete": 1.0}
