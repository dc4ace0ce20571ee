"""llmrtc wire protocol v1, sans-I/O (spec: shared/specs/llmrtc-wire-protocol-v1.md)."""

from .codec import ProtocolError, UnknownMessage, encode, parse_client, parse_server
from .codes import ErrorCode
from .messages import *  # noqa: F403
from .messages import __all__ as _messages_all

PROTOCOL_VERSION = 1

__all__ = [
    "PROTOCOL_VERSION",
    "ErrorCode",
    "ProtocolError",
    "UnknownMessage",
    "encode",
    "parse_client",
    "parse_server",
    *_messages_all,
]
