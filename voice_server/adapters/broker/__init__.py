"""The framed-JSON broker sidecar (specs/sidecar-broker-framed-json.md).

A sans-I/O codec (``codec``), strict DTOs (``messages``), the routing service (``service``), an
asyncio TCP server (``server``), the HTTP proxy (``proxy``) and client helpers (``client``).
The original: the broker service it replaces.
"""

from .client import BatchItem, request_completion, request_completions_batched, send_request
from .codec import DEFAULT_MAX_MESSAGE_BYTES, FrameDecoder, decode_payload, encode_frame
from .errors import BrokerError, FrameError, FrameTooLarge, FrameTruncated, WireValidationError
from .messages import (
    ChatCompletion,
    WireRequest,
    WireResponse,
    WireResult,
    safe_error_message,
    try_parse_request,
)
from .proxy import BrokerProxy
from .server import BrokerServer
from .service import BrokerOptions, BrokerService

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "BatchItem",
    "BrokerError",
    "BrokerOptions",
    "BrokerProxy",
    "BrokerServer",
    "BrokerService",
    "ChatCompletion",
    "FrameDecoder",
    "FrameError",
    "FrameTooLarge",
    "FrameTruncated",
    "WireRequest",
    "WireResponse",
    "WireResult",
    "WireValidationError",
    "decode_payload",
    "encode_frame",
    "request_completion",
    "request_completions_batched",
    "safe_error_message",
    "send_request",
    "try_parse_request",
]
