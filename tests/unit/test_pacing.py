"""When a turn speaks the words it holds rather than wait for the next token (pacing.py), and
which words the chunker gives then (chunker.py ``take_words``)."""

from __future__ import annotations

import pytest

from voice_server.pipeline.chunker import SentenceChunker
from voice_server.pipeline.pacing import MARGIN_S, Pacing


def _paced(token_s: float, synth_s_per_word: float) -> Pacing:
    pacing = Pacing()
    for i in range(12):  # the running paces settle on what they measure
        pacing.delta(i * token_s)
        pacing.synthesized(4, 4 * synth_s_per_word)
    return pacing


def test_the_paces_are_measured():
    pacing = _paced(0.25, 0.04)
    assert pacing.token_s == pytest.approx(0.25, abs=1e-3)
    assert pacing.synth_s_per_word == pytest.approx(0.04, abs=1e-3)


def test_a_slow_llm_speaks_what_it_has_before_the_audio_ends():
    pacing = _paced(0.25, 0.04)
    need = 0.25 + 0.04 * 3 + MARGIN_S  # the next token, then three words to synthesize
    assert pacing.running_dry(need - 0.01, words=2)
    assert not pacing.running_dry(need + 0.01, words=2)


def test_a_fast_llm_waits_for_its_clause():
    """Tokens every 20 ms: a second of audio queued leaves time for whole sentences."""
    assert not _paced(0.02, 0.04).running_dry(1.0, words=5)


def test_turned_off_it_never_cuts():
    assert not Pacing(enabled=False).running_dry(0.0, words=5)


def test_the_wait_the_turn_imposed_is_not_the_llms_pace():
    pacing = _paced(0.05, 0.04)
    pacing.paused()
    pacing.delta(100.0)  # 100 s after the last delta: the turn held the LLM back
    assert pacing.token_s == pytest.approx(0.05, abs=1e-3)


@pytest.mark.parametrize(("held", "piece", "rest"), [
    ("a table for", "a table", "for"),  # "for" may go on ("fortnight")
    ("a table for ", "a table for", ""),
    ("a", None, "a"),
    ("a table", None, "a table"),  # one whole word: too little
    ("for 2 people", None, "for 2 people"),  # never right after a number: "2" may go on
    ("for 2 people at", "for 2 people", "at"),
])
def test_the_whole_words_held_are_taken(held, piece, rest):
    chunker = SentenceChunker(first_max_words=0)
    chunker.feed("Sure thing. ")  # a sentence out first: the pieces after it
    assert chunker.feed(held) == []
    assert chunker.take_words() == piece
    assert (chunker.flush() or "") == rest
