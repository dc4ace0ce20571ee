"""The host package's exception tree, rooted at ``HostError``."""

from __future__ import annotations

__all__ = ["HostError", "LineTooLong", "ProtocolViolation"]


class HostError(Exception):
    """Root of the host package. ``code`` is a protocol error code (spec "Error Codes")."""

    def __init__(self, message: str, *, code: str = "GENERATION_FAILED",
                 request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


class ProtocolViolation(HostError):
    """A decoded line is not a valid message (answered with ``BAD_MESSAGE``)."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message, code="BAD_MESSAGE", request_id=request_id)


class LineTooLong(HostError):
    """More than the line limit arrived without a newline; the stream cannot continue."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Buffer exceeded {limit // 1024} KB without finding newline",
                         code="BAD_MESSAGE")
