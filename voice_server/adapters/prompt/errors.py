"""One exception tree for the prompt service; every error carries its Connect code.

The codes and their HTTP and gRPC equivalents are the Connect protocol's, so that any Connect or
gRPC client reads them: a missing ``tool_name`` is ``invalid_argument``, an unknown tool or secret
is ``not_found`` (the spec's ``tool_not_found``), the rest is mapped from the ``llm/`` error tree.
Messages are ours: a driver's or provider's own text never reaches a client.
"""

from __future__ import annotations

from ...llm.errors import LLMError

__all__ = [
    "CONNECT_HTTP_STATUS",
    "InvalidArgument",
    "PromptError",
    "ProviderConfigError",
    "SecretNotFound",
    "StoreError",
    "ToolNotFound",
    "from_llm_error",
]

# Connect code -> HTTP status (connectrpc protocol, "Error Codes"), in the order of the codes'
# gRPC status numbers (grpc doc/statuscodes.md: canceled = 1 ... unauthenticated = 16).
CONNECT_HTTP_STATUS: dict[str, int] = {
    "canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
    "not_found": 404, "already_exists": 409, "permission_denied": 403,
    "resource_exhausted": 429, "failed_precondition": 400, "aborted": 409, "out_of_range": 400,
    "unimplemented": 501, "internal": 500, "unavailable": 503, "data_loss": 500,
    "unauthenticated": 401,
}


class PromptError(Exception):
    """Root of the prompt service's errors. ``code`` is a Connect code; ``str(err)`` is safe to
    show to a client."""

    code = "internal"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            if code not in CONNECT_HTTP_STATUS:
                raise ValueError(f"unknown Connect code {code!r}")
            self.code = code

    @property
    def message(self) -> str:
        return str(self)

    @property
    def http_status(self) -> int:
        return CONNECT_HTTP_STATUS[self.code]


class InvalidArgument(PromptError):
    """The request is malformed: bad JSON, wrong field types, no ``tool_name``."""

    code = "invalid_argument"


class ToolNotFound(PromptError):
    """No tool configuration has that name (spec: ``tool_not_found``)."""

    code = "not_found"

    def __init__(self, message: str = "tool not found") -> None:
        super().__init__(message)


class SecretNotFound(PromptError):
    """The tool's API-key secret reference does not resolve in the vault."""

    code = "not_found"

    def __init__(self, message: str = "secret not found") -> None:
        super().__init__(message)


class ProviderConfigError(PromptError):
    """The tool configuration cannot build an LLM (unsupported provider, missing model)."""

    code = "internal"


class StoreError(PromptError):
    """The tool store cannot be reached or refused the operation (driver text is logged only)."""

    code = "unavailable"


# the LLM layer's error kinds -> (client-safe message, Connect code)
_ERROR_OF_KIND: dict[str, tuple[str, str]] = {
    "timeout": ("the model did not answer in time", "deadline_exceeded"),
    "rate_limited": ("the model provider is rate limiting requests", "resource_exhausted"),
    "unavailable": ("the model provider is unavailable", "unavailable"),
    "auth": ("the model provider rejected the tool's credentials", "failed_precondition"),
    "model_not_found": ("model not found", "not_found"),
    "bad_request": ("the model provider rejected the request", "invalid_argument"),
}


def from_llm_error(exc: LLMError) -> PromptError:
    """Map the ``llm/`` taxonomy to a client-safe error (the provider's text is not copied)."""
    message, code = _ERROR_OF_KIND.get(exc.kind, ("the model call failed", "internal"))
    return PromptError(message, code=code)
