"""Value types and the provider interface of the LLM layer.

Messages are plain OpenAI chat-completions dicts (``{"role": ..., "content": ...}``), the lingua
franca of every provider we speak to: the embedded llama.cpp model accepts them as they are, and so
does any OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ChatRequest",
    "ChatResult",
    "LLMProvider",
    "LoadsModel",
    "StreamEvent",
    "ToolCall",
    "Usage",
    "WarmsPrompts",
    "message_text",
    "tool_arguments",
]


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # of the input, found computed (read ahead, or the last turn's)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage | None) -> Usage:
        """Two requests' usage together (``None``: none reported)."""
        if other is None:
            return self
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.cached_tokens + other.cached_tokens)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call requested by the model; ``arguments`` is the raw JSON text it produced."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    stop: list[str] | None = None
    timeout_s: float | None = None
    # OpenAI's structured output: {"type": "json_schema", "json_schema": {"name", "schema"}};
    # the answer's text is then one JSON value matching the schema
    response_format: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One step of a streamed answer: a text delta, and on the last event the final details."""

    text: str = ""
    done: bool = False
    finish_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None


@dataclass(slots=True)
class ChatResult:
    text: str
    model: str
    finish_reason: str = "stop"
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    id: str = ""  # the provider's completion id when it gives one (e.g. "chatcmpl-...")


@runtime_checkable
class LLMProvider(Protocol):
    """What every provider implements. Providers are small; routing lives in ``LLMRouter``."""

    name: str
    default_model: str
    supports_vision: bool

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Stream the answer; the last event has ``done=True``. Cancel by closing the iterator."""
        ...

    async def complete(self, request: ChatRequest) -> ChatResult: ...

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]: ...

    async def list_models(self) -> list[str]: ...

    async def health(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class LoadsModel(Protocol):
    """A provider that runs its model here (the embedded one): ``load`` starts it now instead
    of on the first request. A remote endpoint has nothing to load."""

    async def load(self) -> None: ...


@runtime_checkable
class ReachedRemotely(Protocol):
    """A provider at the other end of a network (an OpenAI-compatible endpoint): ``problem``
    says what keeps it from answering ``model``'s turns (unreachable, no such model), or
    None, without asking it for an answer."""

    async def problem(self, model: str | None, timeout_s: float = 3.0) -> str | None: ...


@runtime_checkable
class WarmsPrompts(Protocol):
    """A provider that can compute a prompt before a request needs it (the embedded one, while
    it has nothing else to do): ``warm`` returns when the prompt's cache is kept. A remote
    endpoint keeps its own cache, and is not called ahead."""

    async def warm(self, request: ChatRequest, *, save: bool = True) -> None: ...


def tool_arguments(call: ToolCall) -> dict[str, Any]:
    """Parse a tool call's JSON arguments; raise ``ValueError`` when they are not an object."""
    try:
        value = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"tool {call.name!r} arguments are not JSON: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"tool {call.name!r} arguments must be a JSON object")
    return value


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text; of a multi-part content, its text parts (images dropped)."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content
                        if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")
