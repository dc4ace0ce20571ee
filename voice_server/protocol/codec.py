"""Sans-I/O parsing and serialization of llmrtc v1 messages: text in, typed messages out.

No sockets here: the server edge feeds text frames to ``parse_client`` and sends what ``encode``
returns. Malformed input raises ``ProtocolError`` carrying the spec's error code; a well-formed
message of an unknown type comes back as ``UnknownMessage`` to be logged and ignored
(spec: "Compatibility Notes").
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from .codes import ErrorCode
from .messages import CLIENT_MESSAGES, SERVER_MESSAGES, Error, Message

__all__ = ["ProtocolError", "UnknownMessage", "encode", "parse_client", "parse_server"]

MAX_TYPE_CHARS = 64


class ProtocolError(Exception):
    """A message could not be accepted; ``code`` and ``str(self)`` go back to the peer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    def to_message(self) -> Error:
        return Error(code=self.code, message=str(self))


@dataclass(frozen=True, slots=True)
class UnknownMessage:
    """A well-formed JSON object whose ``type`` this server does not know."""

    type: str


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "message"
        parts.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _parse(text: str | bytes, table: dict[str, type[Message]]) -> Message | UnknownMessage:
    if isinstance(text, bytes | bytearray):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                            "binary frames are not supported; send JSON text")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"message is not valid JSON: {exc}"
                            if isinstance(exc, json.JSONDecodeError)
                            else "message is not valid JSON") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "message must be a JSON object")
    kind = data.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > MAX_TYPE_CHARS:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                            "message needs a 'type' field holding a short string")
    model = table.get(kind)
    if model is None:
        return UnknownMessage(kind)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                            f"invalid '{kind}' message: {_describe(exc)}") from None


def parse_client(text: str | bytes) -> Message | UnknownMessage:
    """Parse one client -> server frame (what the server receives)."""
    return _parse(text, CLIENT_MESSAGES)


def parse_server(text: str | bytes) -> Message | UnknownMessage:
    """Parse one server -> client frame (what a client receives; used by our client and tests)."""
    return _parse(text, SERVER_MESSAGES)


def encode(message: Message) -> str:
    """Serialize with the spec's field names; optional fields left unset are omitted."""
    return message.model_dump_json(by_alias=True, exclude_none=True)

