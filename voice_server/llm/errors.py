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
    whether the same request may succeed later; ``kind`` names the failure, so that a sidecar
    maps it to its protocol's code with a table keyed by ``kind``.
    """

    retryable = False
    kind = "failed"

    def __init__(self, message: str, *, provider: str | None = None, status: int | None = None):
        super().__init__(message)
        self.provider = provider
        self.status = status


class LLMTimeout(LLMError):
    """The provider did not answer (or stopped streaming) within the deadline."""

    kind = "timeout"
    retryable = True


class LLMUnavailable(LLMError):
    """The provider cannot be reached or answered with a server error (5xx)."""

    kind = "unavailable"
    retryable = True


class LLMRateLimited(LLMError):
    """The provider throttled the request; ``retry_after`` is its hint in seconds, if any."""

    kind = "rate_limited"
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class LLMAuthError(LLMError):
    """The provider rejected the credentials (401/403)."""

    kind = "auth"


class LLMBadRequest(LLMError):
    """The provider rejected the request as malformed (400/422)."""

    kind = "bad_request"


class ModelNotFound(LLMError):
    """No provider serves the requested model (or the provider answered 404)."""

    kind = "model_not_found"
