"""Split a streamed LLM answer into speakable pieces as early as possible.

The first piece may end at a clause (comma, colon) once it is long enough, so speech starts
sooner; later pieces end at sentence boundaries. Abbreviations and decimals do not split.
"""

from __future__ import annotations

import re

__all__ = ["SentenceChunker"]

_END = re.compile(r"([.!?…]+[\"')\]]*|\n+)(\s+|$)")
_CLAUSE = re.compile(r"[,;:—](\s+)")
_ABBREV = {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e", "no", "jr", "sr"}


class SentenceChunker:
    def __init__(self, *, first_clause_min_words: int = 5, max_chars: int = 240) -> None:
        self._buf = ""
        self._emitted = 0
        self._first_clause_min_words = first_clause_min_words
        self._max_chars = max_chars

    def feed(self, text: str) -> list[str]:
        """Add streamed text; return the pieces that are complete."""
        self._buf += text
        out: list[str] = []
        while piece := self._take():
            out.append(piece)
        return out

    def flush(self) -> str | None:
        """Return what is left at the end of the stream, if anything speakable."""
        rest, self._buf = self._buf.strip(), ""
        return rest if _speakable(rest) else None

    def _take(self) -> str | None:
        for match in _END.finditer(self._buf):
            if match.end(2) == len(self._buf) and not match.group(2):
                return None  # punctuation at the very end: wait, a digit may follow ("3.")
            before = self._buf[: match.start(1)]
            word = before.rsplit(None, 1)[-1].lower() if before.strip() else ""
            if match.group(1).startswith(".") and word.rstrip(".") in _ABBREV:
                continue
            return self._cut(match.end())
        if self._emitted == 0:
            for match in _CLAUSE.finditer(self._buf):
                if len(self._buf[: match.start()].split()) >= self._first_clause_min_words:
                    return self._cut(match.end())
        if len(self._buf) > self._max_chars:
            cut = self._buf.rfind(" ", 0, self._max_chars)
            return self._cut(cut if cut > 0 else self._max_chars)
        return None

    def _cut(self, end: int) -> str | None:
        piece, self._buf = self._buf[:end].strip(), self._buf[end:]
        if not _speakable(piece):
            return self._take() if self._buf else None
        self._emitted += 1
        return piece


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)
