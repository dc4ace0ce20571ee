"""An in-process LLM provider for adapter tests that need control over timing and cancellation.

Deterministic text over real HTTP comes from ``tests.support.fake_openai.FakeOpenAI``; this
provider is for what an HTTP fake cannot show: every call in flight at once (a barrier),
per-prompt latencies, and whether a cancelled generation really stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from voice_server.llm import ChatRequest, ChatResult, LLMError, StreamEvent, Usage

__all__ = ["ProgrammableProvider", "last_user_text"]


def last_user_text(request: ChatRequest) -> str:
    users = [m for m in request.messages if m.get("role") == "user"]
    content = users[-1]["content"] if users else ""
    return content if isinstance(content, str) else str(content)


class ProgrammableProvider:
    """``answer(request) -> str`` (may sleep or raise); streams the answer word by word.

    ``chunk_gate``: if set, each streamed chunk after the first waits for it (tests release it).
    ``started``/``cancelled``/``finished`` record the lifecycle of every stream.
    """

    supports_vision = False

    def __init__(self, answer: Callable[[ChatRequest], Awaitable[str]] | None = None, *,
                 name: str = "prog", default_model: str = "prog-model") -> None:
        self.name = name
        self.default_model = default_model
        self._answer = answer or self._echo
        self.chunk_gate: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.finished = asyncio.Event()
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    @staticmethod
    async def _echo(request: ChatRequest) -> str:
        return f"echo: {last_user_text(request)}"

    async def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            text = await self._answer(request)
        finally:
            self.in_flight -= 1
        return ChatResult(text=text, model=request.model or self.default_model,
                          usage=Usage(len(last_user_text(request).split()), len(text.split())))

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        self.started.set()
        try:
            text = await self._answer(request)
            for i, word in enumerate(text.split(" ") if text else []):
                if i and self.chunk_gate is not None:
                    await self.chunk_gate.wait()
                yield StreamEvent(text=word if i == 0 else " " + word)
            yield StreamEvent(done=True, finish_reason="stop")
            self.finished.set()
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled.set()
            raise

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        raise LLMError("no embeddings")

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        return {"status": "ok"}

    async def aclose(self) -> None:
        return None
