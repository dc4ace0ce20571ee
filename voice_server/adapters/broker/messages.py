"""Broker DTOs with the spec's strict rules (spec "Data model"), and safe request parsing.

``from_dict`` is strict (unknown keys rejected, types checked, exclusivity rules enforced) and
raises ``WireValidationError`` whose message contains the original's stable substrings, e.g.
``"only one of 'prompt' or 'prompts'"``. ``to_dict`` always writes every key, with
explicit ``null``s, as the original's encoder does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...llm.errors import LLMError
from ..wire_json import has_lone_surrogate
from .codec import decode_payload
from .errors import FrameError, WireValidationError

__all__ = [
    "ChatCompletion",
    "ModelUsage",
    "Prompt",
    "WireRequest",
    "WireResponse",
    "WireResult",
    "is_prompt",
    "safe_error_message",
    "try_parse_request",
]

#: ``str`` | ``dict`` (legacy) | ``list[dict]`` (OpenAI-style messages) — spec "Prompt payloads".
Prompt = str | dict[str, Any] | list[dict[str, Any]]


def is_prompt(value: Any) -> bool:
    """True for the three prompt shapes of the spec."""
    if isinstance(value, str | dict):
        return True
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _check_keys(data: Any, name: str, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise WireValidationError(f"{name} must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise WireValidationError(f"Unknown keys in {name}: {unknown}")
    return data


def _optional_str(data: dict[str, Any], key: str, name: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise WireValidationError(f"{name}.{key} must be a string")
    return value


@dataclass(frozen=True, slots=True)
class WireRequest:
    """Spec "Request": exactly one of ``prompt`` / ``prompts``; ``prompts`` non-empty."""

    prompt: Prompt | None = None
    prompts: list[Prompt] | None = None
    model: str | None = None
    correlation_id: str | None = None

    _KEYS = frozenset({"correlation_id", "model", "prompt", "prompts"})

    def __post_init__(self) -> None:
        if self.prompt is not None and self.prompts is not None:
            raise WireValidationError("WireRequest must include only one of 'prompt' or 'prompts'")
        if self.prompt is None and self.prompts is None:
            raise WireValidationError("WireRequest missing 'prompt' or 'prompts'")
        if self.prompt is not None and not is_prompt(self.prompt):
            raise WireValidationError(
                "WireRequest.prompt must be a valid Prompt (str, dict or list of dicts)")
        if self.prompts is not None:
            if not isinstance(self.prompts, list):
                raise WireValidationError("WireRequest.prompts must be a list")
            if not self.prompts:
                raise WireValidationError("WireRequest.prompts must not be empty")
            if not all(is_prompt(p) for p in self.prompts):
                raise WireValidationError(
                    "WireRequest.prompts: each item must be a valid Prompt")

    @property
    def is_batched(self) -> bool:
        return self.prompts is not None

    @classmethod
    def from_dict(cls, data: Any) -> WireRequest:
        data = _check_keys(data, "WireRequest", cls._KEYS)
        return cls(
            correlation_id=_optional_str(data, "correlation_id", "WireRequest"),
            model=_optional_str(data, "model", "WireRequest"),
            prompt=data.get("prompt"),
            prompts=data.get("prompts"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"correlation_id": self.correlation_id, "model": self.model}
        if self.prompts is not None:
            out["prompts"] = self.prompts
        else:
            out["prompt"] = self.prompt
        return out


@dataclass(slots=True)
class ModelUsage:
    total_calls: int = 0
    total_input_tokens: int = 0
    total_output_tokens: int = 0


@dataclass(slots=True)
class ChatCompletion:
    """One LLM call, in the original's ``ChatCompletion.to_dict()`` shape."""

    root_model: str
    prompt: Prompt
    response: str
    usage: dict[str, ModelUsage] = field(default_factory=dict)
    execution_time: float = 0.0
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(u.total_input_tokens for u in self.usage.values())

    @property
    def completion_tokens(self) -> int:
        return sum(u.total_output_tokens for u in self.usage.values())

    def to_dict(self) -> dict[str, Any]:
        summaries = {
            model: {"total_calls": u.total_calls, "total_input_tokens": u.total_input_tokens,
                    "total_output_tokens": u.total_output_tokens}
            for model, u in sorted(self.usage.items())
        }
        out: dict[str, Any] = {
            "root_model": self.root_model,
            "prompt": self.prompt,
            "response": self.response,
            "usage_summary": {"model_usage_summaries": summaries},
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "execution_time": self.execution_time,
        }
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        if self.finish_reason is not None:
            out["finish_reason"] = self.finish_reason
        return out

    @classmethod
    def from_dict(cls, data: Any) -> ChatCompletion:
        """Tolerant reader: accepts the spec's subset and falls back to flat token counts."""
        if not isinstance(data, dict):
            raise WireValidationError("chat_completion must be a JSON object")
        root = data.get("root_model")
        response = data.get("response")
        if not isinstance(root, str) or not isinstance(response, str):
            raise WireValidationError("chat_completion needs string 'root_model' and 'response'")
        usage: dict[str, ModelUsage] = {}
        summaries = (data.get("usage_summary") or {}).get("model_usage_summaries") or {}
        if isinstance(summaries, dict):
            for model, u in summaries.items():
                if isinstance(u, dict):
                    usage[model] = ModelUsage(int(u.get("total_calls") or 0),
                                              int(u.get("total_input_tokens") or 0),
                                              int(u.get("total_output_tokens") or 0))
        if not usage and ("prompt_tokens" in data or "completion_tokens" in data):
            usage[root] = ModelUsage(1, int(data.get("prompt_tokens") or 0),
                                     int(data.get("completion_tokens") or 0))
        return cls(root_model=root, prompt=data.get("prompt", ""), response=response,
                   usage=usage, execution_time=float(data.get("execution_time") or 0.0),
                   finish_reason=data.get("finish_reason"), tool_calls=data.get("tool_calls"))


@dataclass(frozen=True, slots=True)
class WireResult:
    """Spec "Per-item result": an item error xor a ``chat_completion``."""

    error: str | None = None
    chat_completion: dict[str, Any] | None = None

    _KEYS = frozenset({"error", "chat_completion"})

    def __post_init__(self) -> None:
        if self.error is not None and self.chat_completion is not None:
            raise WireValidationError("WireResult cannot include both 'error' and "
                                      "'chat_completion'")
        if self.error is None and self.chat_completion is None:
            raise WireValidationError("WireResult must include either 'error' or "
                                      "'chat_completion'")

    @classmethod
    def from_dict(cls, data: Any) -> WireResult:
        data = _check_keys(data, "WireResult", cls._KEYS)
        error = _optional_str(data, "error", "WireResult")
        completion = data.get("chat_completion")
        if completion is not None and not isinstance(completion, dict):
            raise WireValidationError("WireResult.chat_completion must be an object")
        return cls(error=error, chat_completion=completion)

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.error, "chat_completion": self.chat_completion}


@dataclass(frozen=True, slots=True)
class WireResponse:
    """Spec "Response": a request-level ``error`` xor ``results`` (the writer's invariant).

    As in the original, a reader accepts both being ``null``; client helpers reject it.
    """

    correlation_id: str | None = None
    error: str | None = None
    results: list[WireResult] | None = None

    _KEYS = frozenset({"correlation_id", "error", "results"})

    def __post_init__(self) -> None:
        if self.error is not None and self.results is not None:
            raise WireValidationError("WireResponse cannot include both 'error' and 'results'")

    @classmethod
    def from_dict(cls, data: Any) -> WireResponse:
        data = _check_keys(data, "WireResponse", cls._KEYS)
        results = data.get("results")
        if results is not None and not isinstance(results, list):
            raise WireValidationError("WireResponse.results must be a list")
        return cls(correlation_id=_optional_str(data, "correlation_id", "WireResponse"),
                   error=_optional_str(data, "error", "WireResponse"),
                   results=None if results is None else [WireResult.from_dict(r)
                                                         for r in results])

    def to_dict(self) -> dict[str, Any]:
        return {
            "correlation_id": self.correlation_id,
            "error": self.error,
            "results": None if self.results is None else [r.to_dict() for r in self.results],
        }


def safe_error_message(exc: BaseException) -> str:
    """Client-safe text for an exception: never a traceback (spec "Error handling")."""
    if isinstance(exc, LLMError | ValueError | TypeError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return "Request timed out"
    if isinstance(exc, ConnectionError | OSError):
        return "Connection error"
    return "Internal broker error"


def try_parse_request(payload: bytes | dict[str, Any]) -> WireRequest | WireResponse:
    """A ``WireRequest``, or a ``WireResponse(error=...)`` for any decode/validation failure.

    ``correlation_id`` is echoed on validation errors only when it was a string; on framing
    errors (bad UTF-8 or JSON, not an object) it is ``null``.
    """
    if isinstance(payload, bytes | bytearray):
        try:
            data: Any = decode_payload(bytes(payload))
        except FrameError as exc:
            return WireResponse(error=safe_error_message(exc))
    else:
        data = payload
    try:
        if has_lone_surrogate(data):  # a JSON escape can spell one; no provider takes it
            raise WireValidationError("WireRequest holds a string with a lone surrogate "
                                      "(not valid UTF-8)")
        return WireRequest.from_dict(data)
    except WireValidationError as exc:
        cid = data.get("correlation_id") if isinstance(data, dict) else None
        return WireResponse(correlation_id=cid if isinstance(cid, str) else None,
                            error=safe_error_message(exc))
