"""``SaidBefore`` (pipeline/tts.py): the audio of pieces said before, kept by their text up to
a budget of bytes, the least recently used dropped first, read-only."""

from __future__ import annotations

import numpy as np
import pytest

from voice_server.pipeline.tts import SaidBefore


def pcm(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int16)


def test_a_piece_is_kept_by_its_text_and_cannot_be_changed() -> None:
    said = SaidBefore(budget=1600)
    assert said.get("For how many people?") is None
    audio = pcm(100)
    said.put("For how many people?", audio)
    kept = said.get("For how many people?")
    assert kept is audio and len(said) == 1
    with pytest.raises(ValueError, match="read-only"):
        kept[0] = 1


def test_the_least_recently_used_go_first_when_the_budget_is_spent() -> None:
    said = SaidBefore(budget=1600)
    for text in "abcdefgh":
        said.put(text, pcm(100))  # 200 bytes each: 1600, all kept
    said.get("a")  # used again: now the newest
    said.put("i", pcm(100))  # 1800: "b", the least recently used, goes
    assert said.get("b") is None and len(said) == 8
    assert all(said.get(t) is not None for t in "acdefghi")


def test_a_piece_too_long_for_an_eighth_of_the_budget_is_not_kept() -> None:
    said = SaidBefore(budget=1600)
    said.put("a long answer", pcm(101))  # 202 bytes > 200
    said.put("short", pcm(100))
    assert said.get("a long answer") is None and said.get("short") is not None
