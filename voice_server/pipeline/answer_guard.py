"""Guards for a spoken answer: no loop, no monologue, never silence.

A small model sometimes repeats itself ("La femme de France la femme de France ...") or talks
on; and any model may answer nothing at all, which leaves the user with silence and an empty
bubble. ``AnswerGuard`` watches the streamed text of one answer, whatever produced it (the chat
model or a playbook), and decides:

- **loop**: the same run of 1 to 8 words three times in a row at the end of the answer (four
  times for a single word), or a sentence of three or more words said a second time. The
  answer stops before the repeat is passed on.
- **length**: once the answer is ``max_chars`` long, it ends at the next sentence end
  (``llm_max_tokens`` stays the hard stop inside the model).
- **empty**: an answer with no word in it is replaced by ``fallback``, spoken and sent to the
  client like any answer, so the turn closes normally on every client.

Issue 18, item 5 ("Guards for a spoken answer").
"""

from __future__ import annotations

import re

from ..config import DEFAULT_APOLOGY, DEFAULT_FALLBACK

__all__ = ["DEFAULT_FALLBACK", "AnswerGuard"]

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_SENTENCE_END = re.compile(r"[.!?…]+(?=\s|$)")
_MAX_RUN = 8


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _loop_start(text: str) -> int | None:
    """Where the repeats begin when the text ends in a run of n words said three times in a
    row (n=1: four times), else None: the text up to there is the answer, said once."""
    spans = [(m.start(), m.group().lower()) for m in _WORD.finditer(text)]
    words = [w for _, w in spans]
    if len(words) >= 4 and len(set(words[-4:])) == 1:
        return spans[-3][0]
    for n in range(2, _MAX_RUN + 1):
        if len(words) < 3 * n:
            break
        if words[-n:] == words[-2 * n:-n] == words[-3 * n:-2 * n]:
            return spans[-2 * n][0]
    return None


class AnswerGuard:
    """Feed each streamed delta to ``admit``; pass on what it returns, stop when ``stopped``."""

    def __init__(self, *, max_chars: int = 600, fallback: str = DEFAULT_FALLBACK,
                 apology: str = DEFAULT_APOLOGY) -> None:
        self._max_chars = max_chars
        self._fallback = fallback
        self.apology = apology  # said when the LLM failed before its first word
        self._text = ""  # what was admitted
        self._sentences: set[tuple[str, ...]] = set()
        self._sentence_start = 0  # index in _text where the current sentence begins
        self._kept: int | None = None  # where a loop began: the answer is the text before it
        self.stopped: str | None = None  # why the answer was ended early: "loop" or "length"

    @property
    def kept(self) -> str:
        """The answer without its loop: what history and the final ``llm`` message carry."""
        return self._text if self._kept is None else self._text[:self._kept].rstrip()

    @property
    def repeated(self) -> int:
        """How many admitted characters come after ``kept``: the loop's start, which the
        sentence chunker may still hold unsaid (``SentenceChunker.drop``)."""
        return 0 if self._kept is None else len(self._text) - self._kept

    def admit(self, delta: str) -> str:
        """The part of ``delta`` to pass on (may be shorter, or empty once stopped)."""
        if self.stopped is not None:
            return ""
        if not self._text:  # an answer starts with its first visible character
            delta = delta.lstrip()
        candidate = self._text + delta
        loop = _loop_start(candidate)
        if loop is None:
            loop = self._repeated_sentence_start(candidate)
        if loop is not None:
            self.stopped = "loop"
            self._kept = min(loop, len(self._text))
            return ""
        if len(self._text) >= self._max_chars and (end := _SENTENCE_END.search(delta)):
            delta = delta[:end.end()]
            self.stopped = "length"
        self._text += delta
        return delta

    def fallback(self) -> str | None:
        """The text to say when the answer had no word in it, else None."""
        return None if _words(self._text) else self._fallback

    def _repeated_sentence_start(self, candidate: str) -> int | None:
        """Where a newly finished sentence of 3+ words begins that this answer already said."""
        start = self._sentence_start
        for end in _SENTENCE_END.finditer(candidate, start):
            words = tuple(_words(candidate[start:end.end()]))
            if len(words) >= 3:
                if words in self._sentences:
                    return start
                self._sentences.add(words)
            start = end.end()
        self._sentence_start = start
        return None
