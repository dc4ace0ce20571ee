"""Sans-I/O framing of the broker wire protocol (spec "Transport framing").

A frame is a 4-byte big-endian unsigned payload length followed by that many bytes of compact
UTF-8 JSON, and the payload must be a JSON object. The length is checked against the cap as soon
as the 4 prefix bytes are known, *before* any payload byte is buffered (spec: "to avoid unbounded
allocations"); a payload of exactly the cap is allowed.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from ..wire_json import compact_json
from .errors import FrameError, FrameTooLarge, FrameTruncated

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "PREFIX",
    "FrameDecoder",
    "decode_payload",
    "encode_frame",
]

#: 10 MB, decimal as in the original (``DEFAULT_MAX_MESSAGE_BYTES = 10_000_000``).
DEFAULT_MAX_MESSAGE_BYTES = 10_000_000
PREFIX = struct.Struct(">I")


def encode_frame(obj: dict[str, Any], *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> bytes:
    """One frame for a JSON object; ``FrameTooLarge`` if the payload exceeds ``max_bytes``."""
    if not isinstance(obj, dict):
        raise FrameError("Frame JSON must be an object")
    payload = compact_json(obj)  # the original's encoder settings
    if len(payload) > max_bytes:
        raise FrameTooLarge(len(payload), max_bytes)
    return PREFIX.pack(len(payload)) + payload


def decode_payload(payload: bytes) -> dict[str, Any]:
    """Decode one payload: UTF-8, then JSON, then "must be an object"; ``FrameError`` otherwise.

    The messages are CPython's decoder texts, passed through as the original does.
    """
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(str(exc)) from exc
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FrameError(str(exc)) from exc
    except RecursionError as exc:
        raise FrameError("JSON nesting too deep") from exc
    if not isinstance(value, dict):
        raise FrameError("Frame JSON must be an object")
    return value


class FrameDecoder:
    """Incremental decoder: ``feed(data)`` returns the complete payloads (raw bytes) seen so far.

    ``FrameTooLarge`` is raised from ``feed`` as soon as an oversize prefix is complete; the
    decoder is then unusable (the stream cannot be resynchronised). ``eof()`` tells a clean end
    (``False``: nothing pending) from a close inside a frame (raises ``FrameTruncated``).
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._need: int | None = None  # payload length once the prefix is known
        self._failed = False

    @property
    def pending(self) -> int:
        """Bytes buffered for the frame in progress."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        if self._failed:
            raise FrameError("decoder failed earlier; the stream cannot be resynchronised")
        self._buffer += data
        frames: list[bytes] = []
        while True:
            if self._need is None:
                if len(self._buffer) < PREFIX.size:
                    return frames
                (length,) = PREFIX.unpack_from(self._buffer)
                if length > self.max_bytes:
                    self._failed = True
                    self._buffer.clear()
                    raise FrameTooLarge(length, self.max_bytes)
                del self._buffer[: PREFIX.size]
                self._need = length
            if len(self._buffer) < self._need:
                return frames
            frames.append(bytes(self._buffer[: self._need]))
            del self._buffer[: self._need]
            self._need = None

    def eof(self) -> bool:
        """The peer closed: ``False`` at a frame boundary, ``FrameTruncated`` inside one."""
        if self._need is None and not self._buffer:
            return False
        if self._need is None:
            raise FrameTruncated("Connection closed before frame prefix complete")
        raise FrameTruncated("Connection closed before message complete", in_payload=True)
