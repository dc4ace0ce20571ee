"""Provider for a GGUF chat model run by llama.cpp in a supervised worker process.

The model is a bundled profile's GGUF file (profiles.py), or any GGUF file given by path;
nothing is downloaded. Tool calls are streamed answers too, in the ``<tool_call>`` format and
constrained by a grammar from the tools' schemas (local_decoding.py). The model runs in its worker
(``local_model.LlamaService`` on ``LlamaEngine``: a KV slot per concurrent answer, first piece
first); a crash there ends the answers in flight with an ``LLMError`` (LLM_ERROR in a voice
turn) and the worker is started again (workers/supervisor.py). Tokens cross back with a bounded
hand-off: the provider tells the worker each token it has read, so a consumer that stops
reading pauses its answer (the voice pipeline gives the CPU to speech synthesis that way)
without holding anyone else's, and a consumer that stops ends its answer at the next token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ..workers import ServiceSpec, SupervisedWorker, WorkerCallFailed, WorkerError
from . import errors
from .errors import LLMBadRequest, LLMError, ModelNotFound
from .llama_cpu import PORTABLE, LlamaCpuBuild
from .local_decoding import (
    ToolCallSplitter,
    forced_call,
    forced_tools,
    json_grammar,
    json_template,
    tool_grammar,
)
from .local_requests import OtherWork, SamplingParams
from .profiles import profile_model_path
from .types import ChatRequest, ChatResult, StreamEvent, Usage, message_text

__all__ = ["LocalLlamaProvider", "tiny_gguf_path"]

TOOL_CALL_TOKENS = 256  # the least room an answer that may call tools gets
SERVICE = "voice_server.llm.local_model:LlamaService"


def tiny_gguf_path() -> Path:
    """The ``tiny`` profile's GGUF file (SmolLM2-135M: the benchmarks' shared model)."""
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
        cpu_build: LlamaCpuBuild | None = None,
    ) -> None:
        self.name = name
        self.model_path = Path(model_path) if model_path else profile_model_path(profile)
        if not self.model_path.is_file():
            raise ModelNotFound(f"local model file not found: {self.model_path}")
        self.default_model = self.model_path.stem
        kwargs = {"model_path": str(self.model_path), "n_ctx": n_ctx, "n_threads": n_threads,
                  "slots": slots, "others": others}
        portable = ServiceSpec(SERVICE, kwargs, label=PORTABLE)
        self.cpu_build = cpu_build or LlamaCpuBuild()  # chosen; health says what runs
        spec = ServiceSpec(SERVICE, kwargs, env=self.cpu_build.env, label=self.cpu_build.name)
        # tool calls and stream starts are quick to hand over; one thread serves them
        self.worker = SupervisedWorker("llm", spec, threads=1, on_restart=on_restart,
                                       fallback=portable if spec != portable else None)

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
        messages, params, tools, splitter, opening = self._prepare(request)
        if opening:  # read, not generated: part of the answer all the same
            yield StreamEvent(text=opening)
        if params.prefix and params.grammar is None and not tools:  # every value given
            yield StreamEvent(done=True, finish_reason="stop", usage=Usage())
            return
        try:
            stream = await self.worker.open_stream("generate", messages, params, tools)
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
                    if text := splitter.feed(item) if splitter else item:
                        yield StreamEvent(text=text)
                    continue
                if splitter is not None and isinstance(item, StreamEvent):
                    if rest := splitter.flush():
                        yield StreamEvent(text=rest)
                    if calls := splitter.calls():
                        item = dataclasses.replace(item, finish_reason="tool_calls",
                                                   tool_calls=tuple(calls))
                yield item
                return
        finally:
            stream.close()
            self.worker.tell("cancel", stream.rid)

    async def warm(self, request: ChatRequest, *, save: bool = True) -> None:
        """Compute the prompt ``request`` would have, when the model has nothing else to do,
        and keep its cache in memory: a request that starts the same way (a playbook stage's
        instructions and tools) then pays only for the rest (local_engine.py). Not ``save``:
        a prefill, up to the user's words (its last message), kept for the question about to
        come only."""
        self._check_model(request)
        messages, params, tools, _, _ = self._prepare(request)
        params = dataclasses.replace(params, prompt_only=True, save_prompt=save)
        try:
            stream = await self.worker.open_stream("generate", messages, params, tools)
            try:
                while not isinstance(await stream.get(), StreamEvent):
                    pass
            finally:
                stream.close()
                self.worker.tell("cancel", stream.rid)
        except WorkerError as exc:
            raise self._map(exc) from exc

    def _prepare(self, request: ChatRequest) -> tuple[
            list[dict[str, Any]], SamplingParams, list[dict[str, Any]] | None,
            ToolCallSplitter | None, str]:
        """The worker's arguments for ``request``: messages, sampling, tools; and the reader's
        side: the splitter of tool calls, and the answer's given opening (JSON)."""
        kw = self._kwargs(request)
        stop = kw.get("stop") or ()
        params = SamplingParams(temperature=kw["temperature"], max_tokens=kw["max_tokens"],
                                stop=(stop,) if isinstance(stop, str) else tuple(stop))
        tools = request.tools if request.tools and request.tool_choice != "none" else None
        splitter = ToolCallSplitter() if tools else None
        opening = ""
        if request.response_format is not None and not tools:
            params = dataclasses.replace(params, grammar=json_grammar(request.response_format),
                                         grammar_lazy=False)
            if template := json_template(request.response_format):
                opening, first, rest = template
                params = dataclasses.replace(params, prefix=opening, grammar=first,
                                             segments=rest)
        if tools:
            tools, forced = forced_tools(tools, request.tool_choice)
            # a call's JSON is not spoken: the spoken-length cap must not cut it in half
            params = dataclasses.replace(params, grammar=tool_grammar(tools),
                                         grammar_lazy=not forced,
                                         max_tokens=max(params.max_tokens, TOOL_CALL_TOKENS))
            if forced and len(tools) == 1:  # the call's start is known: read, not generated
                prefix, grammar, parts = forced_call(tools[0])
                params = dataclasses.replace(params, prefix=prefix, grammar=grammar,
                                             segments=parts)
                assert splitter is not None
                splitter.feed(prefix)
        return kw["messages"], params, tools, splitter, opening

    async def complete(self, request: ChatRequest) -> ChatResult:
        """The streamed answer, collected (tool calls included)."""
        parts: list[str] = []
        done = StreamEvent(done=True)
        async for event in self.stream(request):
            if event.text:
                parts.append(event.text)
            if event.done:
                done = event
        return ChatResult(text="".join(parts), model=self.default_model,
                          finish_reason=done.finish_reason or "stop",
                          tool_calls=list(done.tool_calls or ()), usage=done.usage or Usage())

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        raise LLMBadRequest("the local chat model does not compute embeddings", provider=self.name)

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        worker = self.worker.health()
        return {**worker, "provider": self.name, "model": self.default_model,
                "loaded": worker["status"] == "ok", "cpu_kernels": self.worker.spec.label}

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
        if isinstance(message.get("content"), list):
            message = {**message, "content": message_text(message)}
        out.append(message)
    return out
