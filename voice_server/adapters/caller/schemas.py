"""The published JSON Schemas (``schemas/v1/*.schema.json``) and request validation.

Spec: specs/sidecar-llm-caller-mcp.md, "Method catalog" (payloads share the envelope
``requestId``, ``timestamp``, ``callerTool``) and "Transport status & retry semantics" (schema
violations are HTTP 400 ``BAD_REQUEST``; the original's 500 is a bug).
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from .errors import bad_request

__all__ = ["SCHEMA_NAMES", "SchemaSet", "load_schema", "mcp_input_schema"]

SCHEMA_NAMES = (
    "chat_request", "chat_response", "chat_stream_event", "embed_request", "embed_response",
    "models_request", "models_response", "health_request", "health_response",
)


def load_schema(name: str) -> dict[str, Any]:
    """One published schema as a dict (a fresh copy each call)."""
    if name not in SCHEMA_NAMES:
        raise KeyError(name)
    return copy.deepcopy(_raw(name))


def _raw(name: str) -> dict[str, Any]:
    path = resources.files(__package__).joinpath("schemas", "v1", f"{name}.schema.json")
    return json.loads(path.read_text(encoding="utf-8"))


def mcp_input_schema(name: str) -> dict[str, Any]:
    """The request schema an MCP tool advertises: ``callerTool`` removed (it comes from auth)."""
    schema = load_schema(name)
    schema.pop("$id", None)
    schema["properties"].pop("callerTool", None)
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r != "callerTool"]
    return schema


def _is_datetime(value: object) -> bool:
    """RFC 3339 date-time (what the envelope's ``timestamp`` carries): a date, ``T``, a time
    and a zone (``Z`` or an offset). Checked here rather than with an optional dependency."""
    if not isinstance(value, str):
        return True  # the type keyword reports non-strings
    text = value.strip()
    if len(text) < 20 or text[10] not in "Tt" or not (text[-1] in "Zz" or text[-6] in "+-"):
        return False
    try:
        datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError:
        return False
    return True


class SchemaSet:
    """Compiled validators for the request schemas (one instance per server, no globals)."""

    def __init__(self) -> None:
        checker = FormatChecker(formats=())
        checker.checks("date-time")(_is_datetime)
        self._validators = {
            name: Draft202012Validator(_raw(name), format_checker=checker)
            for name in SCHEMA_NAMES
        }

    def validate(self, name: str, value: Any) -> None:
        """Raise a 400 ``BAD_REQUEST`` ``CallerError`` naming the first violation."""
        validator = self._validators[name]
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.path))), None)
        if error is None:
            return
        where = "/" + "/".join(str(p) for p in error.absolute_path)
        raise bad_request(f"Schema validation failed: {where} {_short(error.message)}")

    def is_valid(self, name: str, value: Any) -> bool:
        return self._validators[name].is_valid(value)


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
