"""The broker package's exception tree, rooted at ``BrokerError``."""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "FrameError",
    "FrameTooLarge",
    "FrameTruncated",
    "WireValidationError",
]


class BrokerError(Exception):
    """Root of the broker package: transport, framing, validation or request-level errors."""


class FrameError(BrokerError, ValueError):
    """A frame could not be decoded (bad UTF-8, bad JSON, not an object, oversize)."""


class FrameTooLarge(FrameError):
    """The length prefix announces more than the cap; raised before reading the payload."""

    def __init__(self, length: int, max_bytes: int) -> None:
        super().__init__(f"Frame too large: {length} bytes (max {max_bytes})")


class FrameTruncated(BrokerError, ConnectionError):
    """The peer closed inside a frame: inside its length prefix, or (``in_payload``) after it."""

    def __init__(self, message: str, *, in_payload: bool = False) -> None:
        super().__init__(message)
        self.in_payload = in_payload


class WireValidationError(BrokerError, ValueError):
    """A decoded object does not follow the spec's ``WireRequest``/``WireResponse`` rules."""
