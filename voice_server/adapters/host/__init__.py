"""The NDJSON host sidecar (specs/sidecar-host-ndjson.md).

A sans-I/O NDJSON codec (``codec``), envelope validation and builders (``messages``), the host
over TCP, Unix sockets or any stream (``server``), and a client (``client``). The Hyperswarm
bridge (Node) lives in ``hyperswarm/`` and pipes peers to the host. The original: the host it
replaces.
"""

from .client import HostClient
from .codec import MAX_LINE_BYTES, LineDecoder, encode
from .errors import HostError, LineTooLong, ProtocolViolation
from .messages import MAX_PROMPT_BYTES, ErrorCode, Message, validate
from .server import HostOptions, HostServer, map_generation_error

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_PROMPT_BYTES",
    "ErrorCode",
    "HostClient",
    "HostError",
    "HostOptions",
    "HostServer",
    "LineDecoder",
    "LineTooLong",
    "Message",
    "ProtocolViolation",
    "encode",
    "map_generation_error",
    "validate",
]
