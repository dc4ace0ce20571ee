"""The one LLM layer: providers behind a small interface, a router, one error tree.

Used by the voice pipeline and by every sidecar adapter.
"""

from .errors import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    ModelNotFound,
)
from .router import LLMRouter, stream_text, stream_within
from .types import (
    ChatRequest,
    ChatResult,
    LLMProvider,
    StreamEvent,
    ToolCall,
    Usage,
    message_text,
    tool_arguments,
)

__all__ = [
    "ChatRequest",
    "ChatResult",
    "LLMAuthError",
    "LLMBadRequest",
    "LLMError",
    "LLMProvider",
    "LLMRateLimited",
    "LLMRouter",
    "LLMTimeout",
    "LLMUnavailable",
    "ModelNotFound",
    "StreamEvent",
    "ToolCall",
    "Usage",
    "message_text",
    "stream_text",
    "stream_within",
    "tool_arguments",
]
