"""An answer written slower than it is spoken keeps speaking (pipeline/pacing.py).

A local model on a busy CPU writes a word every ~250 ms; Piper says one in ~300 ms. Pieces
ended only at sentences, clauses and the chunker's word counts left the listener in silence
while the next one was written ("You can book" ... 1-2 s ... "a table for two people"). The
turn now speaks the whole words it holds when the audio queued would end first. Checked on
what a real aiortc peer hears, and against the same answer with that turned off."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from tests.support.fake_openai import Reply
from voice_server.metrics import TurnRecord
from voice_server.pipeline.audio import resample
from voice_server.pipeline.pacing import Pacing

pytestmark = pytest.mark.slow

ANSWER = ("You can book a table for two people at seven tonight, and we will keep it for "
          "you until a quarter past seven.")
WORD_EVERY_S = 0.25
FRAME = 48_000 // 50  # 20 ms


def longest_silence_s(pcm: np.ndarray) -> float:
    """The longest run of quiet 20 ms frames between the first and the last voiced one."""
    frames = pcm[: len(pcm) // FRAME * FRAME].reshape(-1, FRAME).astype(np.float64)
    voiced = np.flatnonzero(np.sqrt((frames ** 2).mean(axis=1)) > 150)
    if len(voiced) < 2:
        return 0.0
    return float((np.diff(voiced).max() - 1) * 0.02)


def _words(text: str) -> list[str]:
    return [w.strip(".,!?'\"").lower() for w in text.split()]


async def _spoken_slowly(url: str, rtc_server, rtc_llm) -> tuple[float, TurnRecord]:
    """The longest silence the peer heard inside the answer, and the server's turn record.
    Said in pieces of a few words, the answer is still heard as it was written: Whisper,
    hearing what the peer received, gets nearly all its words."""
    rtc_llm.add(Reply(text=ANSWER, chunk_delay_s=WORD_EVERY_S))
    async with RtcClient(url) as client:
        await client.negotiate()
        await client.send({"type": "user-text", "text": "Can I book a table tonight?"})
        await client.wait_for("tts-complete", timeout=scaled(60))
        start, end = client.first_time("tts-start"), client.first_time("tts-complete")
        heard = client.heard_between(start, end + 0.5)
        record = next(r for r in reversed(rtc_server.last_turns)
                      if r.session_id == client.ready["id"])
    assert client.messages("llm")[0]["text"] == ANSWER
    said = await rtc_server.stt.transcribe(resample(heard, 48_000, 16_000))
    found = [w for w in _words(ANSWER) if w in _words(said)]
    assert len(found) >= 0.8 * len(_words(ANSWER)), said
    return longest_silence_s(heard), record


async def test_a_slowly_written_answer_is_spoken_without_long_silences(url, rtc_server, rtc_llm):
    silence_s, record = await _spoken_slowly(url, rtc_server, rtc_llm)
    assert record.early_cuts >= 2, record
    assert max(record.playback_gaps_ms, default=0) < 500, record.playback_gaps_ms
    assert silence_s < 0.6, silence_s


async def test_control_without_pacing_the_same_answer_falls_silent(url, rtc_server, rtc_llm,
                                                                    monkeypatch):
    """The figures above mean something: with pacing off (``tts_keep_speaking`` false), the
    listener waits ~1 s or more."""
    monkeypatch.setattr(rtc_server, "new_pacing", functools.partial(Pacing, enabled=False))
    silence_s, record = await _spoken_slowly(url, rtc_server, rtc_llm)
    assert record.early_cuts == 0
    assert max(record.playback_gaps_ms) > 800, record.playback_gaps_ms
    assert silence_s > 0.9, silence_s
