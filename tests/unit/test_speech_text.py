"""What the voice says of a piece of the answer (pipeline/speech_text.py). The "was heard"
notes are Whisper's transcripts of Piper speaking the piece as it was written."""

from __future__ import annotations

import pytest

from voice_server.pipeline.speech_text import speech_text


@pytest.mark.parametrize(("written", "said"), [
    # was heard "asterisk, asterisk, asterisk, asterisk is the capital of France."
    ("**Paris** is the capital of France.", "Paris is the capital of France."),
    ("*Really* _nice_ __bold__ new", "Really nice bold new"),
    ("- **Pizza**: a classic", "Pizza: a classic"),
    ("* one", "one"),
    ("+ two", "two"),
    ("• three", "three"),
    ("### Summary", "Summary"),  # was heard "Hashashash summary"
    ("> a quote", "a quote"),
    ("1. Pizza", "1. Pizza"),  # said "One, pizza."
    ("Sure! 😊 I can help.", "Sure! I can help."),  # "smiling face with smiling eyes"
    ("👍🏽 Okay.", "Okay."),  # a skin tone
    ("🇫🇷 France", "France"),  # a flag
    ("👨‍👩‍👧 family", "family"),  # joined by zero-width joiners
    ("Great job ⭐!", "Great job!"),
    ("Done ✓ next → step.", "Done next to step."),  # "simple two seven one three", "arrow"
    ("Use `book_table` now.", "Use book table now."),
    ("```python", ""),
    ("3 * 4 is 12, and 5×6 is 30.", "3 times 4 is 12, and 5 times 6 is 30."),
    ("See [the menu](https://example.com/menu).", "See the menu."),
    ("Visit https://www.example.com/menu today.", "Visit example.com/menu today."),
    ("| Name | Price |", "Name, Price"),
    ("|---|:---:|", ""),
    ("~~Monday~~ Tuesday works.", "Tuesday works."),
    # what Piper says well stays as written
    ("Water boils at 100°C.", "Water boils at 100°C."),  # "100 degrees C"
    ("It costs $12.50 or 10 €.", "It costs $12.50 or 10 €."),
    ("Ask Dr. Smith, e.g. at 10:30 - or later.", "Ask Dr. Smith, e.g. at 10:30 - or later."),
    ("Élysée, naïve, 東京", "Élysée, naïve, 東京"),
])
def test_marks_a_voice_would_read_aloud_are_left_out(written, said):
    assert speech_text(written) == said


def test_a_pair_split_between_pieces_is_dropped_in_each():
    """The chunker may cut inside a bold phrase: neither half keeps its marks."""
    assert [speech_text(p) for p in ("**Paris is the", "capital** of France.")] == \
        ["Paris is the", "capital of France."]
