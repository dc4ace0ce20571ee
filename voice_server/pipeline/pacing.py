"""Keep an answer's speech from running dry while the LLM writes it slowly.

The chunker (chunker.py) ends pieces at sentences, clauses and a few fixed word counts. When
the LLM writes little faster than the voice speaks (a local model on a busy CPU writes a
token every 100-180 ms, a number one token a digit, while Piper says ~3 words a second), a
piece waits for its last word to be written, then for its synthesis, and the piece before it
has played out by then: the listener hears "You can book" ... up to two seconds of silence
... "a table for 2 people at 7 o'clock".

``Pacing`` tells the turn when to speak the complete words it holds now rather than wait for
the next token: when the audio still queued would end before the next token came and a piece
of the words so far plus one could be synthesized. It learns both paces in the turn itself:
the time between the LLM's deltas and Piper's time per word. Sans-I/O: the clock is passed in.
"""

from __future__ import annotations

__all__ = ["Pacing"]

MARGIN_S = 0.1  # resampling, queueing and the playout's own frame: what a piece needs besides
SMOOTHING = 0.5  # weight of the newest measure in each running pace


class Pacing:
    """The paces of one answer: the LLM's time between deltas and Piper's time per word."""

    def __init__(self, *, enabled: bool = True, token_s: float = 0.1,
                 synth_s_per_word: float = 0.05) -> None:
        self.enabled = enabled  # off: pieces end where the chunker ends them, whatever the pace
        self.token_s = token_s
        self.synth_s_per_word = synth_s_per_word
        self._last_delta_at: float | None = None

    def delta(self, now: float) -> None:
        """The LLM gave a delta at ``now``."""
        if self._last_delta_at is not None:
            self.token_s = _blend(self.token_s, now - self._last_delta_at)
        self._last_delta_at = now

    def paused(self) -> None:
        """The turn held the LLM back: the next delta's wait is not its pace."""
        self._last_delta_at = None

    def synthesized(self, words: int, seconds: float) -> None:
        """Piper took ``seconds`` for a piece of ``words`` words."""
        if words > 0:
            self.synth_s_per_word = _blend(self.synth_s_per_word, seconds / words)

    def running_dry(self, ahead_s: float, words: int) -> bool:
        """Whether to speak the ``words`` complete words held now: waiting for the next delta
        and then synthesizing one word more would end after the ``ahead_s`` seconds of audio
        still queued."""
        needed = self.token_s + self.synth_s_per_word * (words + 1) + MARGIN_S
        return self.enabled and ahead_s < needed


def _blend(old: float, new: float) -> float:
    return (1 - SMOOTHING) * old + SMOOTHING * max(0.0, new)
