"""One exception tree for the LLM layer; provider errors are mapped here at the boundary."""

from __future__ import annotations

__all__ = [
    "LLMAuthError",
    "LLMBadRequest",
    "LLMError",
    "LLMRateLimited",
    "LLMTimeout",
    "LLMUnavailable",
    "ModelNotFound",
]


class LLMError(Exception):
    """Root of every error raised by the LLM layer.

    ``retryable`` tells callers (retry policies, sidecars mapping to their own error codes)
    whether the same request may succeed later.
    """

    retryable = False

    def __init__(self, message: str, *, provider: str | None = None, status: int | None = None):
        super().__init__(message)
        self.provider = provider
        self.status = status


class LLMTimeout(LLMError):
    """The provider did not answer (or stopped streaming) within the deadline."""

    retryable = True


class LLMUnavailable(LLMError):
    """The provider cannot be reached or answered with a server error (5xx)."""

    retryable = True


class LLMRateLimited(LLMError):
    """The provider throttled the request; ``retry_after`` is its hint in seconds, if any."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class LLMAuthError(LLMError):
    """The provider rejected the credentials (401/403)."""


class LLMBadRequest(LLMError):
    """The provider rejected the request as malformed (400/422)."""


class ModelNotFound(LLMError):
    """No provider serves the requested model (or the provider answered 404)."""
