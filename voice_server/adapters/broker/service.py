"""Broker semantics over the ``llm/`` layer, without sockets.

- ``model`` null, missing or blank: the default model. A configured name: that model, and
  ``root_model`` is the name the LLM layer resolved it to. Anything else is unknown: a per-item
  error for ``prompt``, a request-level error for ``prompts`` (the original's asymmetry, kept).
- Batched prompts run concurrently; results keep request order and cardinality; one failing
  item is an item error. A batch over ``batch_timeout_s`` is a request-level "Request timed out".
- Every completion of a request with a ``correlation_id`` is recorded (spec "Docker proxy
  expectations": nested calls are retrievable per correlation id).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from typing import Any

from pydantic import Field

from ...llm import ChatRequest, LLMRouter
from ..kit import StrictModel
from .errors import BrokerError
from .messages import (
    ChatCompletion,
    ModelUsage,
    Prompt,
    WireRequest,
    WireResponse,
    WireResult,
    safe_error_message,
)

__all__ = ["BrokerOptions", "BrokerService", "CompletionLog", "UnknownModel", "prompt_messages"]


class UnknownModel(BrokerError):
    """The request names a model the broker is not configured to serve."""


class BrokerOptions(StrictModel):
    """Adapter options (not server-wide settings): model names, limits, sampling."""

    models: dict[str, str] = Field(default_factory=dict,
                                   description="public model name -> LLM layer model spec")
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    request_timeout_s: float | None = Field(None, gt=0)
    batch_timeout_s: float | None = Field(300.0, gt=0)
    max_message_bytes: int = Field(10_000_000, ge=64)
    idle_timeout_s: float | None = Field(300.0, gt=0)
    log_capacity: int = Field(1000, ge=0, description="correlation ids kept in the call log")


class CompletionLog:
    """Completions per correlation id, oldest ids evicted beyond ``capacity``."""

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self._calls: OrderedDict[str, list[ChatCompletion]] = OrderedDict()

    def record(self, correlation_id: str, completion: ChatCompletion) -> None:
        if self.capacity <= 0:
            return
        self._calls.setdefault(correlation_id, []).append(completion)
        self._calls.move_to_end(correlation_id)
        while len(self._calls) > self.capacity:
            self._calls.popitem(last=False)

    def get(self, correlation_id: str) -> list[ChatCompletion]:
        return list(self._calls.get(correlation_id, ()))


def prompt_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """Chat messages for a prompt: a string is one user turn; a message list is used as is;
    a legacy dict is a message (``role``+``content``), a ``{"messages": [...]}`` wrapper, or
    else sent as JSON text in one user turn."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        return prompt
    if "role" in prompt and "content" in prompt:
        return [prompt]
    if isinstance(prompt.get("messages"), list):
        return prompt["messages"]
    return [{"role": "user", "content": json.dumps(prompt, ensure_ascii=False)}]


class BrokerService:
    """Answers ``WireRequest``s with ``WireResponse``s using one ``LLMRouter``."""

    def __init__(self, router: LLMRouter, options: BrokerOptions | None = None) -> None:
        self.router = router
        self.options = options or BrokerOptions()
        self.log = CompletionLog(self.options.log_capacity)

    @property
    def default_model(self) -> str:
        return self.router.resolve(None)[1]

    def allowed_models(self) -> list[str]:
        return sorted({self.default_model, *self.options.models})

    def route(self, model: str | None) -> str | None:
        """The LLM-layer model spec for a wire ``model``; ``UnknownModel`` if not served."""
        if model is None or not model.strip():
            return None
        if model in self.options.models:
            return self.options.models[model]
        if model == self.default_model:
            return None
        raise UnknownModel(f"Unknown model '{model}'. Allowed: {self.allowed_models()}")

    async def complete(self, prompt: Prompt, spec: str | None) -> ChatCompletion:
        """One LLM call as a ``ChatCompletion`` (raises ``LLMError`` on failure)."""
        started = time.perf_counter()
        result = await self.router.complete(ChatRequest(
            messages=prompt_messages(prompt), model=spec, temperature=self.options.temperature,
            max_tokens=self.options.max_tokens, timeout_s=self.options.request_timeout_s))
        _, root = self.router.resolve(spec)
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                 for c in result.tool_calls] or None
        return ChatCompletion(
            root_model=root, prompt=prompt, response=result.text,
            usage={root: ModelUsage(1, result.usage.input_tokens, result.usage.output_tokens)},
            execution_time=time.perf_counter() - started, finish_reason=result.finish_reason,
            tool_calls=calls)

    async def _item(self, prompt: Prompt, spec: str | None, cid: str | None) -> WireResult:
        try:
            completion = await self.complete(prompt, spec)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure is this item's error, never a traceback
            return WireResult(error=safe_error_message(exc))
        if cid is not None:
            self.log.record(cid, completion)
        return WireResult(chat_completion=completion.to_dict())

    async def handle(self, request: WireRequest) -> WireResponse:
        """The response for a valid request (spec "Response" invariants hold by construction)."""
        cid = request.correlation_id
        try:
            spec = self.route(request.model)
        except UnknownModel as exc:  # an item error for prompt, a request error for prompts
            if request.is_batched:
                return WireResponse(correlation_id=cid, error=str(exc))
            return WireResponse(correlation_id=cid, results=[WireResult(error=str(exc))])
        if not request.is_batched:
            return WireResponse(correlation_id=cid,
                                results=[await self._item(request.prompt, spec, cid)])
        prompts = request.prompts or []
        try:
            async with asyncio.timeout(self.options.batch_timeout_s):
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(self._item(p, spec, cid), name=f"broker-item-{i}")
                             for i, p in enumerate(prompts)]
        except TimeoutError:
            return WireResponse(correlation_id=cid, error="Request timed out")
        return WireResponse(correlation_id=cid, results=[t.result() for t in tasks])
