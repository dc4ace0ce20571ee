"""Sans-I/O NDJSON framing of the host protocol (spec "Requirement: NDJSON Framing").

One JSON value per line, lines split on ``\\n`` only. As in the original, empty lines
are skipped and lines that are not valid UTF-8 JSON are dropped silently (counted in
``dropped``); a value that is not an object is passed on, so that envelope validation can answer
``BAD_MESSAGE``. A line longer than the limit raises ``LineTooLong`` as soon as the limit is
passed, before the excess is buffered.
"""

from __future__ import annotations

import json
from typing import Any

from ..wire_json import compact_json
from .errors import LineTooLong

__all__ = ["MAX_LINE_BYTES", "LineDecoder", "encode"]

#: 64 KiB, the original's decoder buffer limit.
MAX_LINE_BYTES = 64 * 1024


def encode(message: dict[str, Any]) -> bytes:
    """``JSON.stringify(obj) + "\\n"``: compact, non-ASCII kept raw, one line."""
    return compact_json(message) + b"\n"


class LineDecoder:
    """``feed(bytes) -> [value, ...]`` for every complete, valid JSON line."""

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._partial = bytearray()
        self.dropped = 0

    @property
    def pending(self) -> int:
        return len(self._partial)

    def _parse(self, line: bytes | bytearray, out: list[Any]) -> None:
        if len(line) > self.max_line_bytes:
            raise LineTooLong(self.max_line_bytes)
        if not line.strip():
            return
        try:
            out.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, ValueError, RecursionError):
            self.dropped += 1

    def feed(self, data: bytes) -> list[Any]:
        *lines, rest = data.split(b"\n")
        if lines:  # the partial line ends here
            lines[0] = self._partial + lines[0]
            self._partial = bytearray()
        out: list[Any] = []
        for line in lines:
            self._parse(line, out)  # a complete line over the limit raises there
        if len(self._partial) + len(rest) > self.max_line_bytes:
            self._partial.clear()
            raise LineTooLong(self.max_line_bytes)
        self._partial += rest
        return out

    def flush(self) -> list[Any]:
        """At end of stream: a last line without ``\\n`` is parsed like any other."""
        out: list[Any] = []
        line, self._partial = self._partial, bytearray()
        self._parse(line, out)
        return out
