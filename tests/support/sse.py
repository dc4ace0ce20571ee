"""Reading a server's server-sent events back, for tests of the caller sidecar's
``chatStream``."""

from __future__ import annotations


class SSEDecoder:
    """Incremental SSE parser: ``feed(bytes) -> [data strings]`` (multi-line data joined by
    newlines, comments and other fields ignored); refuses a line longer than ``max_line``."""

    def __init__(self, *, max_line: int = 1 << 20) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._max_line = max_line

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        out: list[str] = []
        while True:
            cut = self._buffer.find(b"\n")
            if cut < 0:
                if len(self._buffer) > self._max_line:
                    raise ValueError("SSE line too long")
                return out
            line, self._buffer = self._buffer[:cut].rstrip(b"\r"), self._buffer[cut + 1:]
            if not line:
                if self._data:
                    out.append("\n".join(self._data))
                    self._data = []
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                self._data.append(value.removeprefix(b" ").decode("utf-8"))
