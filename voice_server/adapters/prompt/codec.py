"""Sans-I/O codec of ``prompt.v1.PromptService/Run``: bytes in, values out, bytes to send.

Spec: specs/sidecar-prompt-service.md ("Data Model", "gRPC (JSON) Flow"). Where the spec is
silent, the codec does what the original Go service does, so its clients work unchanged:

- request keys are accepted in snake_case and in proto-JSON lowerCamelCase (what protobuf's
  JSON mapping sends); ``temperature: 0`` and ``max_output_tokens: 0`` mean "not set" (a proto3
  zero cannot be told from an absent field);
- the response is the spec's canonical object in snake_case with explicit zeros;
- Connect answers are chosen by the request content type: ``application/json`` gets
  standard Connect unary (non-200 + ``{code, message}``), ``application/connect+json`` (and any
  other JSON-ish type, as the original does not check it) gets the original's 200 + ``{"error":…}``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..wire_json import compact_json, loads_strict
from .errors import InvalidArgument, PromptError

__all__ = [
    "MAX_MESSAGE_BYTES",
    "ConnectMode",
    "RunRequest",
    "build_response",
    "connect_error",
    "connect_mode",
    "connect_success",
    "normalize_input",
    "normalize_tools",
    "parse_run_request",
]

MAX_MESSAGE_BYTES = 4 * 1024 * 1024

_KEYS = {  # wire key (either spelling) -> field
    "tool_name": "tool_name", "toolName": "tool_name",
    "model": "model", "input": "input", "tools": "tools", "temperature": "temperature",
    "max_output_tokens": "max_output_tokens", "maxOutputTokens": "max_output_tokens",
}


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A decoded ``PromptRunRequest``; ``None`` means "not set, use the tool's default"."""

    tool_name: str
    input: Any = None
    model: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    temperature: float | None = None
    max_output_tokens: int | None = None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_run_request(body: bytes | str | dict[str, Any]) -> RunRequest:
    """Decode and validate a request body. Raises ``InvalidArgument`` with the spec's messages:
    ``invalid JSON body`` (not an object, or a field of the wrong type) and
    ``tool_name is required``."""
    if isinstance(body, dict):
        raw = body
    else:
        if len(body) > MAX_MESSAGE_BYTES:
            raise InvalidArgument("request body too large")
        try:
            # strict, as the original's protojson: "invalid escape code", numbers out of range
            raw = loads_strict(body)
        except ValueError:
            raise InvalidArgument("invalid JSON body") from None
    if not isinstance(raw, dict):
        raise InvalidArgument("invalid JSON body")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = _KEYS.get(key)
        if name is not None and value is not None:
            values[name] = value
    tool_name = values.get("tool_name", "")
    model = values.get("model")
    temperature = values.get("temperature")
    max_tokens = values.get("max_output_tokens")
    tools = values.get("tools", [])
    if not isinstance(tool_name, str) or (model is not None and not isinstance(model, str)):
        raise InvalidArgument("invalid JSON body")
    if temperature is not None and (not _is_number(temperature) or not math.isfinite(temperature)):
        raise InvalidArgument("invalid JSON body")
    if max_tokens is not None:
        if isinstance(max_tokens, float) and max_tokens.is_integer():
            max_tokens = int(max_tokens)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) \
                or not 0 <= max_tokens < 2**31:
            raise InvalidArgument("invalid JSON body")
    if not isinstance(tools, list):
        raise InvalidArgument("invalid JSON body")
    if not tool_name.strip():
        raise InvalidArgument("tool_name is required")
    if temperature is not None and temperature < 0:
        raise InvalidArgument("temperature must not be negative")
    return RunRequest(
        tool_name=tool_name.strip(), input=values.get("input"), model=model or None,
        tools=normalize_tools(tools),
        temperature=float(temperature) if temperature else None,
        max_output_tokens=max_tokens or None)


def normalize_tools(tools: list[Any]) -> list[dict[str, Any]]:
    """``ToolDefinition`` list -> OpenAI chat ``tools``; entries without a function name are
    dropped; a non-object entry is an ``invalid JSON body``."""
    out = []
    for tool in tools:
        if not isinstance(tool, dict):
            raise InvalidArgument("invalid JSON body")
        function = tool.get("function")
        if function is None:
            continue
        if not isinstance(function, dict):
            raise InvalidArgument("invalid JSON body")
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            continue
        params = function.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise InvalidArgument("invalid JSON body")
        entry: dict[str, Any] = {"name": name, "parameters": params}
        if isinstance(function.get("description"), str):
            entry["description"] = function["description"]
        out.append({"type": "function", "function": entry})
    return out


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def normalize_input(value: Any) -> str:
    """``input`` (string or blocks) -> one prompt, as the original does:
    blocks ``{type:"text",text}`` and ``{content}`` give their text, strings pass, any other
    item is compact JSON; the parts are joined with newlines and trimmed."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return _compact(value)
    parts = []
    for item in value:
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict) and item.get("type") == "text" \
                and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif isinstance(item, dict) and isinstance(item.get("content"), str):
            parts.append(item["content"])
        else:
            parts.append(_compact(item))
    return "\n".join(parts).strip()


def _tool_call_block(name: str, arguments: str) -> dict[str, Any]:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):  # proto ToolCall.arguments is a Struct: keep the raw text
        args = {"raw": arguments}
    return {"type": "tool_call", "tool_call": {"name": name, "arguments": args}}


def build_response(*, id: str, model: str, created: int, text: str,
                   tool_calls: list[tuple[str, str]] = (), input_tokens: int = 0,
                   output_tokens: int = 0) -> dict[str, Any]:
    """The spec's canonical response ("Data Model"). ``tool_calls`` are ``(name, arguments
    JSON)`` pairs; a text block is emitted when there is text or nothing else."""
    output: list[dict[str, Any]] = []
    if text or not tool_calls:
        output.append({"type": "output_text", "text": text})
    output.extend(_tool_call_block(name, args) for name, args in tool_calls)
    return {
        "id": id, "object": "response", "model": model, "created": created, "output": output,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "total_tokens": input_tokens + output_tokens},
    }


# --- Connect -------------------------------------------------------

ConnectMode = str  # "standard" | "compat" | "unsupported"

_CONNECT_HEADERS = {"Connect-Protocol-Version": "1"}


def connect_mode(content_type: str | None) -> ConnectMode:
    """``application/json`` -> standard Connect unary; a protobuf codec -> unsupported (415);
    anything else -> the original's variant, which ignores the content type."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        return "standard"
    if media in ("application/proto", "application/protobuf", "application/connect+proto"):
        return "unsupported"
    return "compat"


def connect_success(mode: ConnectMode, response: dict[str, Any]
                    ) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a successful unary call."""
    if mode == "standard":
        return 200, {"Content-Type": "application/json"}, compact_json(response)
    headers = {"Content-Type": "application/connect+json", **_CONNECT_HEADERS}
    return 200, headers, compact_json(response) + b"\n"


def connect_error(mode: ConnectMode, error: PromptError) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a failed unary call: standard Connect uses the code's HTTP
    status and ``{code, message}``; the original's variant answers 200 with ``{"error":…}`` and a
    ``Connect-Error-Code`` header."""
    if mode == "compat":
        headers = {"Content-Type": "application/connect+json", **_CONNECT_HEADERS,
                   "Connect-Error-Code": error.code}
        body = {"error": {"code": error.code, "message": error.message, "details": []}}
        return 200, headers, compact_json(body) + b"\n"
    if mode == "unsupported":
        return 415, {"Content-Type": "application/json"}, compact_json(
            {"code": "unimplemented", "message": "unsupported codec: use application/json"})
    body = {"code": error.code, "message": error.message}
    return error.http_status, {"Content-Type": "application/json"}, compact_json(body)
