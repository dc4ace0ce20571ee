"""Server-sent events for ``chatStream`` (sans-I/O): sanitizing and framing.

Spec: specs/sidecar-llm-caller-mcp.md, "Response metadata": events are sanitized (control
characters stripped, payloads truncated to 4,000 chars); on error the final SSE chunk carries
``{error, message, retryAfterMs}``. The drop rules and the ``[DONE]`` terminator follow the
original.
"""

from __future__ import annotations

import re
from typing import Any

from ..wire_json import compact_json

__all__ = [
    "DONE_FRAME",
    "MAX_CONTENT_UNITS",
    "encode_event",
    "sanitize_event",
    "sanitize_text",
]

MAX_CONTENT_UNITS = 4000  # UTF-16 code units, like the original's JavaScript string length
DONE_FRAME = b"data: [DONE]\n\n"
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _truncate_utf16(text: str, limit: int) -> str:
    if len(text) <= limit // 2:  # fast path: cannot exceed the limit
        return text
    data = text.encode("utf-16-le")
    if len(data) <= limit * 2:
        return text
    return data[: limit * 2].decode("utf-16-le", errors="ignore")


def sanitize_text(text: str) -> str | None:
    """Strip control characters and truncate; ``None`` when the text must be dropped.

    Dropped: empty after stripping, or at least 20% control characters (binary noise).
    """
    if not text:
        return None
    cleaned, removed = _CONTROL.subn("", text)
    if not cleaned or removed * 5 >= len(text):
        return None
    return _truncate_utf16(cleaned, MAX_CONTENT_UNITS)


def sanitize_event(event: dict[str, Any]) -> dict[str, Any] | None:
    """Sanitize one ``delta``/``completion`` event; ``None`` means drop it (e.g. role-only)."""
    if event.get("type") == "delta":
        content = (event.get("delta") or {}).get("content")
        cleaned = sanitize_text(content) if isinstance(content, str) else None
        if cleaned is None:
            return None
        return {**event, "delta": {**event["delta"], "content": cleaned}}
    if event.get("type") == "completion":
        payload = event.get("payload") or {}
        content = (payload.get("message") or {}).get("content")
        cleaned = sanitize_text(content) if isinstance(content, str) else None
        if cleaned is None:
            return None
        message = {**payload["message"], "content": cleaned}
        return {**event, "payload": {**payload, "message": message}}
    return None


def encode_event(obj: dict[str, Any]) -> bytes:
    """One SSE frame: ``data: <compact JSON>\\n\\n`` (JSON never contains a raw newline)."""
    return b"data: " + compact_json(obj) + b"\n\n"
