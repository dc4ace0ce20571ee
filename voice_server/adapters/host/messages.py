"""Host protocol messages: envelope validation, error codes, limits and builders.

Spec "Requirement: Message Envelope" and the message requirements; shapes and messages as the
original's ``validate.ts``: the envelope needs a known string ``type`` and, if present,
a string ``request_id`` (else "Invalid message envelope"); a known type with a bad shape is
"Invalid <type> message". Extra keys are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .errors import ProtocolViolation

__all__ = [
    "CLIENT_TIMEOUT_S",
    "MAX_CLIENTS",
    "MAX_PROMPT_BYTES",
    "MESSAGE_TYPES",
    "ErrorCode",
    "Message",
    "abort",
    "chat_chunk",
    "chat_end",
    "chat_start",
    "error",
    "server_info",
    "validate",
]

MAX_CLIENTS = 5
CLIENT_TIMEOUT_S = 30.0
#: "8 KB", counted in UTF-8 bytes.
MAX_PROMPT_BYTES = 8192

MESSAGE_TYPES = frozenset({"server_info", "chat_start", "chat_chunk", "chat_end", "abort",
                           "error"})
_FINISH_REASONS = frozenset({"stop", "abort", "error"})
_STATUSES = frozenset({"ready", "busy"})


class ErrorCode(StrEnum):
    """Spec "Requirement: Error Codes", plus the original's client-local ``USER_DISCONNECTED``."""

    INVALID_SERVER_ID = "INVALID_SERVER_ID"
    CONNECT_FAILED = "CONNECT_FAILED"
    HOST_OFFLINE = "HOST_OFFLINE"
    HOST_DISCONNECTED = "HOST_DISCONNECTED"
    OLLAMA_NOT_FOUND = "OLLAMA_NOT_FOUND"
    OLLAMA_MODEL_NOT_AVAILABLE = "OLLAMA_MODEL_NOT_AVAILABLE"
    MODEL_BUSY = "MODEL_BUSY"
    GENERATION_FAILED = "GENERATION_FAILED"
    GENERATION_ABORTED = "GENERATION_ABORTED"
    BAD_MESSAGE = "BAD_MESSAGE"
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    TIMEOUT_NO_RESPONSE = "TIMEOUT_NO_RESPONSE"
    USER_DISCONNECTED = "USER_DISCONNECTED"


@dataclass(frozen=True, slots=True)
class Message:
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None


def _str(payload: Any, key: str) -> bool:
    return isinstance(payload, dict) and isinstance(payload.get(key), str)


def _shape_ok(kind: str, request_id: str | None, payload: Any) -> bool:
    if kind == "server_info":
        return _str(payload, "host_name") and _str(payload, "model") and \
            payload.get("status") in _STATUSES
    if kind == "chat_start":
        return request_id is not None and _str(payload, "prompt")
    if kind == "chat_chunk":
        return request_id is not None and _str(payload, "text")
    if kind == "chat_end":
        return request_id is not None and isinstance(payload, dict) and \
            payload.get("finish_reason") in _FINISH_REASONS
    if kind == "abort":
        return request_id is not None and (payload is None or isinstance(payload, dict))
    return _str(payload, "code") and _str(payload, "message")  # error


def validate(value: Any) -> Message:
    """A ``Message`` for a valid line, else ``ProtocolViolation`` (without ``request_id``)."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str) \
            or value["type"] not in MESSAGE_TYPES:
        raise ProtocolViolation("Invalid message envelope")
    request_id = value.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolViolation("Invalid message envelope")
    kind = value["type"]
    payload = value.get("payload")
    if not _shape_ok(kind, request_id, payload):
        raise ProtocolViolation(f"Invalid {kind} message")
    return Message(kind, payload if isinstance(payload, dict) else {}, request_id)


def server_info(host_name: str, model: str, status: str = "ready") -> dict[str, Any]:
    return {"type": "server_info", "payload": {"host_name": host_name, "model": model,
                                               "status": status}}


def chat_start(request_id: str, prompt: str) -> dict[str, Any]:
    return {"type": "chat_start", "request_id": request_id, "payload": {"prompt": prompt}}


def chat_chunk(request_id: str, text: str) -> dict[str, Any]:
    return {"type": "chat_chunk", "request_id": request_id, "payload": {"text": text}}


def chat_end(request_id: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {"type": "chat_end", "request_id": request_id,
            "payload": {"finish_reason": finish_reason}}


def abort(request_id: str) -> dict[str, Any]:
    """As the original's client sends it: no payload."""
    return {"type": "abort", "request_id": request_id}


def error(code: str, message: str, request_id: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "error"}
    if request_id is not None:
        out["request_id"] = request_id
    out["payload"] = {"code": str(code), "message": message}
    return out
