"""The embedded GGUF model inside its worker process (the service behind ``LocalLlamaProvider``).

llama.cpp runs here, never in the server process: a crash in it (an illegal instruction on a
CPU the build does not fit, a segfault) ends this process, the answers in flight end with
LLM_ERROR, and the supervisor (workers/supervisor.py) starts the worker again. Every answer,
with tools or without, runs on ``LlamaEngine`` (local_engine.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..compat import llama_model
from .errors import LLMError
from .local_engine import LlamaEngine
from .local_requests import Generation, OtherWork, SamplingParams

__all__ = ["LlamaService", "llama_system_info"]


def llama_system_info() -> str:
    """llama.cpp's own line of the CPU features it was compiled with."""
    import llama_cpp

    return llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()


class LlamaService:
    """One model, a KV slot per concurrent answer; checked with a one-token answer at start."""

    def __init__(self, *, model_path: str, n_ctx: int = 8192, n_threads: int = 2,
                 slots: int = 4, others: OtherWork | None = None) -> None:
        from llama_cpp import Llama

        self.model_path = Path(model_path)
        # The Llama object gives the weights, the tokenizer and the chat template; answers and
        # tool calls use the engine's context, so its own stays the smallest llama.cpp allows.
        self._llama = Llama(model_path=str(self.model_path), n_ctx=256, n_threads=n_threads,
                            verbose=False)
        n_ctx = min(n_ctx, llama_model(self._llama).n_ctx_train() or n_ctx)
        self._engine = LlamaEngine(self._llama, slots=slots, n_ctx=n_ctx,
                                   n_threads=n_threads, others=others)
        self._generations: dict[int, Generation] = {}
        self._lock = threading.Lock()
        self._self_test()

    def _self_test(self) -> None:
        """One decoded token: a build that does not fit this CPU fails here, not in a turn."""
        done = threading.Event()
        outcome: list[Any] = []

        def deliver(item: Any) -> None:
            if not isinstance(item, str):
                outcome.append(item)
                done.set()

        self._engine.submit([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=1),
                            deliver)
        if not done.wait(120) or isinstance(outcome[0], BaseException):
            raise LLMError(f"the model's self-test failed: {outcome[:1] or 'no answer'}")

    def info(self) -> dict[str, Any]:
        return {"model": self.model_path.stem, "system_info": llama_system_info()}

    def close(self) -> None:
        self._engine.close()
        self._llama.close()

    # ---- streams (started by the worker; items go back through ``emit``) ---------------------
    def generate(self, emit: Callable[[Any], None], rid: int, messages: list[dict[str, Any]],
                 params: SamplingParams, tools: list[dict[str, Any]] | None = None) -> None:
        def deliver(item: Any) -> None:  # on the engine thread
            if not isinstance(item, str):  # the last item: done, or an error
                with self._lock:
                    self._generations.pop(rid, None)
            emit(item)

        gen = self._engine.submit(messages, params, deliver, tools)
        with self._lock:
            if not gen.finished:
                self._generations[rid] = gen

    def consumed(self, rid: int) -> None:
        """The reader took one text delta of stream ``rid``."""
        with self._lock:
            gen = self._generations.get(rid)
        if gen is not None:
            self._engine.consumed(gen)

    def cancel(self, rid: int) -> None:
        with self._lock:
            gen = self._generations.pop(rid, None)
        if gen is not None:
            self._engine.cancel(gen)
