"""The caller's error taxonomy (sans-I/O): classes, HTTP statuses, sanitized texts, retry hints.

Spec: specs/sidecar-llm-caller-mcp.md, "Transport status & retry semantics" and "Error taxonomy".
A client sees one fixed sentence per classification (a provider's own text may carry prompts,
keys or URLs), retry hints clamped to 60 s, and 401 for a missing or unknown token apart from 403
for a known client calling a method it is not allowed.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from voice_server.llm.errors import LLMError

__all__ = [
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

# spec table "Classification -> HTTP status", and the one sentence a client sees for each
_CLASSES = {
    "RATE_LIMIT": (429, "Provider rate limited the request."),
    "AUTH": (502, "Provider authentication failed."),
    "TEMPORARY": (503, "Provider encountered a temporary error."),
    "PERMANENT": (422, "Provider rejected the request."),
    "CONFIG": (500, "Provider configuration error."),
}
RETRYABLE = frozenset({"TEMPORARY", "RATE_LIMIT"})
# the LLM layer's error kinds; an error of no kind here is classified by its HTTP status
_CLASS_OF_KIND = {
    "rate_limited": "RATE_LIMIT", "auth": "AUTH", "bad_request": "PERMANENT",
    "model_not_found": "PERMANENT", "timeout": "TEMPORARY", "unavailable": "TEMPORARY",
}


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

    def __init__(self, classification: str, *, retry_after_ms: float | None = None) -> None:
        status, message = _CLASSES[classification]
        super().__init__(status, classification, message, retry_after_ms=retry_after_ms)
        self.classification = classification

    @property
    def retryable(self) -> bool:
        return self.classification in RETRYABLE


def classify(exc: LLMError) -> ProviderError:
    """Map the LLM layer's error tree to the taxonomy: by the error's kind, else its status."""
    classification = _CLASS_OF_KIND.get(exc.kind) or _class_of_status(exc.status)
    retry_after_s = getattr(exc, "retry_after", None) if classification == "RATE_LIMIT" else None
    hint = retry_after_s * 1000 if retry_after_s is not None else None
    return ProviderError(classification, retry_after_ms=hint)


def _class_of_status(status: int | None) -> str:
    if status in (401, 403):
        return "AUTH"
    if status == 429:
        return "RATE_LIMIT"
    if status is not None and 400 <= status < 500:
        return "PERMANENT"
    return "TEMPORARY"


# the transport's own errors: ``bad_request(message)`` and so on
bad_request = functools.partial(CallerError, 400, "BAD_REQUEST")
unauthorized = functools.partial(CallerError, 401, "UNAUTHORIZED")
forbidden = functools.partial(CallerError, 403, "FORBIDDEN")
internal = functools.partial(CallerError, 500, "INTERNAL_ERROR")
