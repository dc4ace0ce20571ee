"""Routing: which provider serves a model name. One router serves the voice pipeline and every
sidecar, built from the same configuration."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from .errors import LLMTimeout, ModelNotFound
from .types import ChatRequest, ChatResult, LLMProvider, StreamEvent, WarmsPrompts

__all__ = ["LLMRouter", "stream_text", "stream_within"]


class LLMRouter:
    """Named providers plus a default. ``resolve(model)`` picks the provider for a model name:

    - ``None`` or ``""``: the default provider with its default model;
    - ``"provider/model"`` or a provider's name: that provider;
    - a name listed in ``aliases`` (config ``llm_models``): the aliased provider and model;
    - otherwise: the default provider, if it lists the model, else ``ModelNotFound``.
    """

    def __init__(self, providers: dict[str, LLMProvider], *, default: str,
                 aliases: dict[str, tuple[str, str]] | None = None) -> None:
        if default not in providers:
            raise ValueError(f"default provider {default!r} is not configured")
        self.providers = providers
        self.default = default
        self.aliases = dict(aliases or {})

    @property
    def default_provider(self) -> LLMProvider:
        return self.providers[self.default]

    def resolve(self, model: str | None) -> tuple[LLMProvider, str]:
        if not model:
            provider = self.default_provider
            return provider, provider.default_model
        if model in self.aliases:
            pname, pmodel = self.aliases[model]
            return self.providers[pname], pmodel
        if model in self.providers:
            provider = self.providers[model]
            return provider, provider.default_model
        if "/" in model:
            pname, _, pmodel = model.partition("/")
            if pname in self.providers:
                return self.providers[pname], pmodel
        for provider in self.providers.values():
            if model == provider.default_model:
                return provider, model
        raise ModelNotFound(f"no configured provider serves model {model!r}")

    def _routed(self, request: ChatRequest) -> tuple[LLMProvider, ChatRequest]:
        provider, model = self.resolve(request.model)
        return provider, ChatRequest(**{**_fields(request), "model": model})

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        provider, routed = self._routed(request)
        return provider.stream(routed)

    async def complete(self, request: ChatRequest) -> ChatResult:
        provider, routed = self._routed(request)
        return await provider.complete(routed)

    async def warm(self, request: ChatRequest, *, save: bool = True) -> bool:
        """Have the provider compute ``request``'s prompt ahead, when it can (``WarmsPrompts``:
        the embedded model; ``save``: see ``LocalProvider.warm``); returns whether it did."""
        provider, routed = self._routed(request)
        if not isinstance(provider, WarmsPrompts):
            return False
        await provider.warm(routed, save=save)
        return True

    def supports_vision(self, model: str | None = None) -> bool:
        return self.resolve(model)[0].supports_vision

    async def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        """Each provider's health; one that does not answer in ``timeout_s`` (a hung endpoint)
        is ``unknown``, so a health check always answers."""
        async def one(provider: LLMProvider) -> dict[str, Any]:
            try:
                async with asyncio.timeout(timeout_s):
                    return await provider.health()
            except TimeoutError:
                return {"status": "unknown", "error": f"no answer in {timeout_s:g} s"}

        reports = await asyncio.gather(*(one(p) for p in self.providers.values()))
        return dict(zip(self.providers, reports, strict=True))

    async def aclose(self) -> None:
        for provider in self.providers.values():
            await provider.aclose()


async def stream_within(router: LLMRouter, request: ChatRequest,
                        timeout_s: float | None) -> AsyncIterator[StreamEvent]:
    """``router.stream(request)``, failing with ``LLMTimeout`` when the whole answer takes longer
    than ``timeout_s`` (None: no limit); the provider's stream is closed however it ends.

    The deadline guards each wait for the provider only: a timeout scope held open across
    ``yield`` would fire inside the consumer's own awaits (speaking a piece) and cancel it,
    which the turn cannot tell from a barge-in."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    stream = router.stream(request)
    try:
        while True:
            try:
                if deadline is not None and loop.time() >= deadline:
                    raise TimeoutError
                async with asyncio.timeout_at(deadline):
                    event = await anext(stream)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise LLMTimeout(f"the LLM did not finish in {timeout_s:g} s") from None
            yield event
    finally:
        await stream.aclose()


async def stream_text(router: LLMRouter, request: ChatRequest, timeout_s: float | None, *,
                      on_done: Callable[[StreamEvent], None]) -> AsyncIterator[str]:
    """The answer's text as it streams (``stream_within``); ``on_done`` gets the last event,
    with the usage and any tool calls."""
    async with contextlib.aclosing(stream_within(router, request, timeout_s)) as events:
        async for event in events:
            if event.text:
                yield event.text
            if event.done:
                on_done(event)


def _fields(request: ChatRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in request.__dataclass_fields__}
