"""What a worker process wrote to stderr just before it died, for the log line of its death.

A native crash says why on stderr. C++ code prints ``terminate called after throwing ...
what(): ...`` when an exception escapes into ctypes, ggml prints ``GGML_ASSERT(...) failed``,
and glibc prints ``free(): invalid pointer``. The exit status gives only the signal. The
worker's stderr is a pipe: a thread copies each line to the server's own stderr (file
descriptor 2, where the worker used to write directly, so logs and captures are unchanged)
and keeps the lines of the last ``WINDOW_S`` seconds.

The worker runs with ``GGML_NO_BACKTRACE`` set (supervisor.py). Otherwise ggml's crash handler
attaches gdb to print a backtrace. That delays the restart by about a second, and the trace
shows only the Python thread that reads the pipe.
"""

from __future__ import annotations

import collections
import os
import re
import threading
import time
from typing import IO

__all__ = ["LastWords"]

WINDOW_S = 5.0  # lines older than this when the process died are not about its death
KEEP = 40
# a line that says what went wrong (any other line, such as a model's loading notes, is not
# quoted: a process killed by the OOM killer says nothing)
TELLING = re.compile(r"what\(\)|assert|abort|error|fatal|illegal|segmentation|invalid|"
                     r"terminate|out of memory", re.IGNORECASE)


class LastWords:
    """Relays ``stream`` (a process's stderr pipe) to our stderr, line by line, on a daemon
    thread, and remembers the recent lines."""

    def __init__(self, stream: IO[bytes], *, out_fd: int = 2) -> None:
        self._stream = stream
        self._out_fd = out_fd
        self._lines: collections.deque[tuple[float, str]] = collections.deque(maxlen=KEEP)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._relay, name="worker-stderr", daemon=True)
        self._thread.start()

    def _relay(self) -> None:
        with self._stream:
            for line in iter(self._stream.readline, b""):
                try:
                    os.write(self._out_fd, line)
                except OSError:
                    pass  # our stderr is gone: keep reading, so the worker never blocks
                text = line.decode("utf-8", "replace").strip()
                if text:
                    with self._lock:
                        self._lines.append((time.monotonic(), text))

    def said(self, *, wait_s: float = 1.0) -> str:
        """Why the process died, in its own words: its last two telling lines of the last
        ``WINDOW_S`` seconds, or "" when it said nothing of the kind. Waits
        up to ``wait_s`` for the pipe's end (its last lines)."""
        self._thread.join(wait_s)
        with self._lock:
            now = time.monotonic()
            recent = [text for at, text in self._lines if now - at <= WINDOW_S]
        return " ".join([text for text in recent if TELLING.search(text)][-2:])[:300]
