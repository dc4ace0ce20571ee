"""What one request to the embedded model's engine (``local_engine.py``) is: how its answer is
sampled (``SamplingParams``), and how far it has come (``Generation``); and what the engine reads
of the process's other CPU work (``OtherWork``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .kv_slots import Slot
from .local_decoding import StopText
from .local_sampling import Sampler

__all__ = ["Deliver", "Generation", "OtherWork", "SamplingParams"]


class OtherWork(Protocol):
    """The process's other CPU work (``compute.ComputePool``), read from the engine thread."""

    @property
    def urgent_jobs(self) -> int: ...

    @property
    def running_jobs(self) -> int: ...


Deliver = Callable[[Any], None]  # str (a text delta) | StreamEvent (done) | LLMError


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.2
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int = 0xC0FFEE
    grammar: str | None = None  # GBNF the answer must follow (local_decoding.tool_grammar)
    grammar_lazy: bool = True  # ... only from "<tool_call>" on (else from the first token)
    prefix: str = ""  # the start of the answer, given (written after the prompt)
    # an answer written in parts: when ``grammar`` is complete, each (text, grammar) pair gives
    # the text that follows (read, not generated) and the grammar of the part after it (None:
    # the text ends the answer)
    segments: tuple[tuple[str, str | None], ...] = ()
    prompt_only: bool = False  # compute the prompt's cache; answer nothing
    # ... and save it in memory (a playbook stage's prompt, for every call); False: a prefill,
    # kept in its slot only, for the question about to come (the module docstring)
    save_prompt: bool = True


class Generation:
    """One answer in progress. Created by ``LlamaEngine.submit``; its reader calls
    ``consumed()`` for each text delta it takes and ``LlamaEngine.cancel`` when it stops."""

    def __init__(self, messages: list[dict[str, Any]], params: SamplingParams,
                 deliver: Deliver, ahead: int, tools: list[dict[str, Any]] | None = None) -> None:
        self.messages = messages
        self.tools = tools
        self.params = params
        self.deliver = deliver
        self.credit = ahead  # text deltas it may deliver before its reader takes them
        self.prompt: list[int] = []
        self.pending: list[int] = []  # prompt tokens not yet evaluated
        self.last: int | None = None  # sampled, not yet in the KV cache
        self.produced = 0
        self.cached = 0  # prompt tokens found in the slot's cache (not evaluated again)
        self.max_tokens = params.max_tokens
        self.slot: Slot | None = None
        self.sampler: Sampler | None = None
        self.text = StopText(params.stop)
        self.segments = list(params.segments)  # parts still to write (SamplingParams.segments)
        self.part = b""  # what the model wrote of the part it writes (of those)
        self.finished = False

    @property
    def background(self) -> bool:
        """A prompt-only request (``SamplingParams.prompt_only``)."""
        return self.params.prompt_only

    @property
    def prefill(self) -> bool:
        """A prompt-only request for the question about to come, not saved."""
        return self.params.prompt_only and not self.params.save_prompt
