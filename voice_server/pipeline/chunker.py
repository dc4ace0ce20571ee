"""Split a streamed LLM answer into speakable pieces as early as possible.

The first piece may end at a clause (comma, colon) once it is long enough, or, when the first
``first_max_words`` words bring no boundary, at the word boundary after them (a number counts
as one word per digit, up to 6, and a piece never ends right after one): speech starts
sooner, because Piper's time grows with the text (about 25 ms per word on one core) and a long
first sentence would delay it. With ``second_max_words`` the second piece may end early the
same way: a short first piece plays for under a second, and a long second sentence would not
be written and synthesized by then (a gap in the speech). Later pieces end at sentence
boundaries. Abbreviations and decimals do not split. When the LLM writes an answer slowly,
``take_words`` gives the whole words held as a piece at once (pacing.py says when).

No piece is longer than ``max_chars``: a longer sentence is cut at its last clause boundary
within the limit (or, without one in its last two thirds, at the last space). Piper needs
about 1 MB per character of a piece while it speaks it (+130 MB at 120 characters, +270 MB
at 240), so the cap bounds the server's peak memory; and a shorter piece is ready sooner
(Piper takes about 5 ms per character on one core).
"""

from __future__ import annotations

import re

__all__ = ["SentenceChunker", "spoken_words"]

_END = re.compile(r"([.!?…]+[\"')\]]*|\n+)(\s+|$)")
_CLAUSE = re.compile(r"[,;:—](\s+)")
_WORD = re.compile(r"\S+")
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")
_ABBREV = {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e", "no", "jr", "sr"}


class SentenceChunker:
    def __init__(self, *, first_clause_min_words: int = 4, first_max_words: int = 6,
                 second_max_words: int = 0, max_chars: int = 120) -> None:
        self._buf = ""
        self._emitted = 0
        self._first_clause_min_words = first_clause_min_words
        self._first_max_words = first_max_words
        self._second_max_words = second_max_words
        self._max_chars = max_chars

    def feed(self, text: str) -> list[str]:
        """Add streamed text; return the pieces that are complete."""
        self._buf += text
        out: list[str] = []
        while piece := self._take():
            out.append(piece)
        return out

    def complete_words(self) -> int:
        """How many words the whole words held are said in (the last one may continue in the
        next delta unless a space follows it)."""
        return spoken_words(self._buf[:_last_space(self._buf)])

    def take_words(self, min_words: int = 2) -> str | None:
        """The whole words held, as a piece now (speech would otherwise run dry: pacing.py):
        at least ``min_words`` of them, never ending right after a number (its digits may go
        on: "2" then ",150"); None otherwise."""
        end = _last_space(self._buf)
        words = self._buf[:end].split()
        if len(words) < min_words or _has_digit(words[-1]):
            return None
        return self._cut(end)

    def drop(self, chars: int) -> None:
        """Forget the last ``chars`` characters fed, those not yet emitted (a loop the answer
        guard cut: neither spoken nor kept)."""
        self._buf = self._buf[:max(0, len(self._buf) - chars)]

    def flush(self) -> str | None:
        """Return what is left at the end of the stream, if anything speakable."""
        rest, self._buf = self._buf.strip(), ""
        return rest if _speakable(rest) else None

    def _take(self) -> str | None:
        end = self._sentence_end()
        cut = None
        if self._emitted == 0:
            cut = self._early_cut(end, self._first_max_words)
        elif self._emitted == 1 and self._second_max_words:
            cut = self._early_cut(end, self._second_max_words)
        if cut is None:
            cut = end
        if cut is not None and len(self._buf[:cut].strip()) <= self._max_chars:
            return self._cut(cut)
        if cut is not None or len(self._buf.lstrip()) > self._max_chars:
            return self._cut(self._long_cut())
        return None

    def _early_cut(self, end: int | None, max_words: int) -> int | None:
        """Where an early piece ends: its first clause after enough words, or the soft cut
        after ``max_words`` (0: none), whichever comes first."""
        limit = len(self._buf) if end is None else end
        cuts = [match.end() for match in _CLAUSE.finditer(self._buf, 0, limit)
                if len(self._buf[: match.start()].split()) >= self._first_clause_min_words]
        if max_words and (soft := self._soft_cut(end, max_words)) is not None:
            cuts.append(soft)
        return min(cuts, default=None)

    def _long_cut(self) -> int:
        """Where to cut a piece that would be longer than ``max_chars``: after the last clause
        boundary within the limit if it keeps at least a third of it, else at the last space."""
        start = len(self._buf) - len(self._buf.lstrip())
        limit = start + self._max_chars
        clauses = [match.start(1) for match in _CLAUSE.finditer(self._buf, start, limit)]
        if clauses and clauses[-1] - start >= self._max_chars // 3:
            return clauses[-1]
        space = self._buf.rfind(" ", start, limit + 1)
        return space if space > start else limit

    def _sentence_end(self) -> int | None:
        for match in _END.finditer(self._buf):
            if match.end(2) == len(self._buf) and not match.group(2):
                return None  # punctuation at the very end: wait, a digit may follow ("3.")
            before = self._buf[: match.start(1)]
            word = before.rsplit(None, 1)[-1].lower() if before.strip() else ""
            if match.group(1).startswith(".") and word.rstrip(".") in _ABBREV:
                continue
            if match.group(1) == "." and before[before.rfind("\n") + 1:].strip().isdigit():
                continue  # a list's "2." opening its line belongs to its item
            return match.end()
        return None

    def _soft_cut(self, sentence_end: int | None, max_words: int) -> int | None:
        """Where to end a long early piece without punctuation: after a complete word (one
        followed by a space) once ``max_words`` words are in, never after a number, and, when
        the sentence's end is known, only if at least 3 words would follow."""
        count = 0
        for match in _WORD.finditer(self._buf, 0, sentence_end or len(self._buf)):
            word = match.group()
            count += spoken_words(word)
            if match.end() == len(self._buf):
                return None  # the word may continue in the next delta
            if count >= max_words and not _has_digit(word):
                if sentence_end is not None and len(
                        self._buf[match.end():sentence_end].split()) < 3:
                    return None
                return match.end()
        return None

    def _cut(self, end: int) -> str | None:
        piece, self._buf = self._buf[:end].strip(), self._buf[end:]
        if not _speakable(piece):
            return self._take() if self._buf else None
        self._emitted += 1
        return piece


def spoken_words(text: str) -> int:
    """About how many words ``text`` is said in: a number one per digit, up to 6
    ("2,150,000" is "two million one hundred fifty thousand")."""
    return sum(min(digits, 6) if (digits := sum(c.isdigit() for c in word)) else 1
               for word in text.split())


def _has_digit(word: str) -> bool:
    return any(c.isdigit() for c in word)


def _last_space(text: str) -> int:
    """Where the last whitespace in ``text`` ends the words before it (0: none)."""
    match = _LAST_SPACE.search(text)
    return match.start() if match else 0


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)
