"""The caller's error taxonomy (sans-I/O): classes, HTTP statuses, sanitized texts, retry hints.

Spec: specs/sidecar-llm-caller-mcp.md, "Transport status & retry semantics" and "Error taxonomy";
the sanitized messages, the clamp and the 401/403 split follow the origin (notes 3.2, 3.6 #10).
"""

from __future__ import annotations

import math
from typing import Any

from voice_server.llm.errors import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    ModelNotFound,
)

__all__ = [
    "CLASS_STATUS",
    "MAX_RETRY_AFTER_MS",
    "CallerError",
    "ProviderError",
    "bad_request",
    "clamp_retry_after_ms",
    "classify",
    "forbidden",
    "internal",
    "retry_after_header",
    "unauthorized",
]

MAX_RETRY_AFTER_MS = 60_000

# spec table "Classification -> HTTP status"
CLASS_STATUS = {"RATE_LIMIT": 429, "TEMPORARY": 503, "PERMANENT": 422, "AUTH": 502, "CONFIG": 500}
_SANITIZED = {
    "RATE_LIMIT": "Provider rate limited the request.",
    "AUTH": "Provider authentication failed.",
    "TEMPORARY": "Provider encountered a temporary error.",
    "PERMANENT": "Provider rejected the request.",
    "CONFIG": "Provider configuration error.",
}
RETRYABLE = frozenset({"TEMPORARY", "RATE_LIMIT"})


def clamp_retry_after_ms(value: Any) -> int | None:
    """A hint that is not a finite number > 0 is dropped; otherwise ``min(ceil(ms), 60000)``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return min(math.ceil(value), MAX_RETRY_AFTER_MS)


def retry_after_header(ms: int) -> str:
    """The ``Retry-After`` header value in whole seconds, at least 1."""
    return str(max(1, math.ceil(ms / 1000)))


class CallerError(Exception):
    """Root of the caller's errors: an HTTP status, a wire code and a client-safe message."""

    def __init__(self, status: int, code: str, message: str, *,
                 retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_ms = clamp_retry_after_ms(retry_after_ms)

    def body(self, trace_id: str | None = None) -> dict[str, Any]:
        """The JSON error body: ``{error, message, retryAfterMs?, traceId?}``."""
        out: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.retry_after_ms is not None:
            out["retryAfterMs"] = self.retry_after_ms
        if trace_id is not None:
            out["traceId"] = trace_id
        return out


class ProviderError(CallerError):
    """An upstream failure, classified (``RATE_LIMIT`` ...) and mapped to the spec's status."""

    def __init__(self, classification: str, *, retry_after_ms: float | None = None,
                 detail: str | None = None) -> None:
        super().__init__(CLASS_STATUS[classification], classification,
                         _SANITIZED[classification], retry_after_ms=retry_after_ms)
        self.classification = classification
        self.detail = detail  # for logs only; never sent to clients

    @property
    def retryable(self) -> bool:
        return self.classification in RETRYABLE


def classify(exc: LLMError) -> ProviderError:
    """Map the LLM layer's error tree to the taxonomy (origin ``mapStatusToClassification``)."""
    detail = str(exc)
    if isinstance(exc, LLMRateLimited):
        hint = exc.retry_after * 1000 if exc.retry_after is not None else None
        return ProviderError("RATE_LIMIT", retry_after_ms=hint, detail=detail)
    if isinstance(exc, LLMAuthError):
        return ProviderError("AUTH", detail=detail)
    if isinstance(exc, LLMBadRequest | ModelNotFound):
        return ProviderError("PERMANENT", detail=detail)
    if isinstance(exc, LLMTimeout | LLMUnavailable):
        return ProviderError("TEMPORARY", detail=detail)
    status = exc.status
    if status in (401, 403):
        return ProviderError("AUTH", detail=detail)
    if status == 429:
        return ProviderError("RATE_LIMIT", detail=detail)
    if status is not None and 400 <= status < 500:
        return ProviderError("PERMANENT", detail=detail)
    return ProviderError("TEMPORARY", detail=detail)


def bad_request(message: str) -> CallerError:
    return CallerError(400, "BAD_REQUEST", message)


def unauthorized(message: str = "Missing client token") -> CallerError:
    return CallerError(401, "UNAUTHORIZED", message)


def forbidden(message: str) -> CallerError:
    return CallerError(403, "FORBIDDEN", message)


def internal(message: str = "Internal Error") -> CallerError:
    return CallerError(500, "INTERNAL_ERROR", message)
