"""How the embedded model picks each token: llama.cpp's sampler chain (``ChainSampler``),
with a grammar first in it when the answer has one, and the lazy tool-call grammar
(``LazyToolSampler``): free text until a trigger, then the grammar.

llama.cpp has a lazy grammar of its own (``llama_sampler_init_grammar_lazy_patterns``), and it
can abort the process. When a trigger pattern matches, it hands its grammar the text from the
trigger on, up to the end of the token that completed the match. If that text breaks the
grammar, llama.cpp throws a C++ exception ("Unexpected empty grammar stack after accepting
piece"). The exception passes through its C API into ctypes, which cannot catch it, so the
process ends with SIGABRT. A small model does write such text. SmolLM2 has no ``<tool_call>``
token, so it writes the tag in pieces, and its last piece may be ``><`` or ``></``, running
on into another tag. Any model may also open a bare call as ``{"name",``. A CI run lost its
worker this way. Upstream, llama-server dies the same way on tool calls (ggml-org/llama.cpp
issues 12597, open, and 15608). ``tests/unit/test_local_sampling.py`` checks that llama.cpp
(llama-cpp-python 0.3.36) still aborts.

So the trigger is watched here, in Python, and the grammar is only ever handed text it
accepts. Each token is checked with the grammar's own test of a candidate token (which rejects,
never throws) before it is accepted. The text is fed in pieces. When the token that completes a
trigger carries text the grammar rejects, that token is replaced by the grammar's own choice
at that position. It has not been decoded yet (the engine feeds a sampled token at the next
step), so nothing is undone.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import re
from typing import Any, Protocol

import numpy as np

from ..compat import llama_grammar_parses, llama_sampler
from .local_decoding import TRIGGERS

__all__ = ["ChainSampler", "LazyToolSampler", "Sampler", "sampler", "token_piece"]

log = logging.getLogger(__name__)


class Sampler(Protocol):
    def sample(self, ctx: Any, index: int) -> int:
        """The next token for the logits at ``index`` of ``ctx``, accepted by the sampler."""

    def allows(self, token: int) -> bool:
        """Whether the answer's grammar may take ``token`` next (True without one)."""

    def accept(self, token: int) -> None:
        """Take ``token`` as the next one, given (one the grammar ``allows``)."""


def token_piece(vocab: Any, token: int, *, special: bool = False) -> bytes:
    """The bytes of ``token``; ``special``: control tokens as their text, not as nothing."""
    import llama_cpp

    buffer = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token, buffer, 64, 0, special)
    return buffer.raw[:max(0, n)]


def sampler(params: Any, model: Any, trigger_tokens: list[int]) -> Sampler:
    """The sampler of one answer (``SamplingParams``; ``model``: the ``_internals.LlamaModel``).
    A grammar llama.cpp cannot parse (from a user's JSON Schema) is left out, with a warning."""
    if params.grammar and not llama_grammar_parses(model, params.grammar):
        log.warning("llama.cpp cannot parse the grammar of this answer (from a JSON Schema); "
                    "it is generated without one: %.200s", params.grammar)
        params = dataclasses.replace(params, grammar=None)
    if params.grammar and params.grammar_lazy:
        return LazyToolSampler(params, model, trigger_tokens)
    return ChainSampler(params, model)


class ChainSampler:
    """The chain llama-cpp-python uses by default (top-k 40, top-p 0.95, min-p 0.05), or greedy
    at temperature 0, after ``params.grammar`` (one llama.cpp parses) when there is one."""

    quick = True  # greedy grammar answers check the likeliest token first (``sample``)

    def __init__(self, params: Any, model: Any) -> None:
        import llama_cpp
        from llama_cpp import llama_grammar

        self.params = params
        self.model = model
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(model.vocab)  # (once, not every token)
        self.chain = llama_sampler()
        if params.grammar:
            self.chain.add_grammar(model, llama_grammar.LlamaGrammar.from_string(
                params.grammar, verbose=False))
        if params.temperature <= 0:
            self.chain.add_greedy()
        else:
            self.chain.add_top_k(40)
            self.chain.add_top_p(0.95, 1)
            self.chain.add_min_p(0.05, 1)
            self.chain.add_temp(params.temperature)
            self.chain.add_dist(params.seed)

    def sample(self, ctx: Any, index: int) -> int:
        """A greedy answer under a grammar (a forced tool call) first offers the grammar only
        the most likely token, and takes it when the grammar allows it, which is the same
        token the full sampler would pick. llama.cpp would otherwise test every token of the
        vocabulary (152k for Qwen) against the grammar at each step: measured here, 30 ms of a
        90 ms step with the 1.5B model on 2 cores."""
        import llama_cpp as c

        if self.params.grammar and self.quick and self.params.temperature <= 0:
            logits = np.ctypeslib.as_array(c.llama_get_logits_ith(ctx, index),
                                           shape=(self.n_vocab,))
            best = int(logits.argmax())
            if self.allows(best, float(logits[best])):
                c.llama_sampler_accept(self.chain.sampler, best)
                return best
        return int(c.llama_sampler_sample(self.chain.sampler, ctx, index))

    def allows(self, token: int, logit: float = 0.0) -> bool:
        """Whether the grammar may take ``token`` next: its test of one candidate, which marks
        a rejected one and never throws. True without a grammar."""
        import llama_cpp as c

        if not self.params.grammar:
            return True
        cell = (c.llama_token_data * 1)(c.llama_token_data(token, logit, 0.0))
        candidates = c.llama_token_data_array(cell, 1, -1, False)
        c.llama_sampler_apply(c.llama_sampler_chain_get(self.chain.sampler, 0),
                              ctypes.byref(candidates))
        return bool(np.isfinite(cell[0].logit))

    def accept(self, token: int) -> None:
        """Take ``token`` as the next one (the grammar must allow it: ``allows``)."""
        import llama_cpp as c

        c.llama_sampler_accept(self.chain.sampler, token)

    def feed(self, text: str) -> bool:
        """Accept ``text`` as written (its tokens, each tested first); False at the first
        token the grammar rejects (this sampler is then spent)."""
        import llama_cpp as c

        for token in self.model.tokenize(text.encode("utf-8"), add_bos=False, special=False):
            if not self.allows(token):
                return False
            c.llama_sampler_accept(self.chain.sampler, token)
        return True


class LazyToolSampler:
    """Free text until a trigger (a ``trigger_tokens`` token, or ``TRIGGERS`` matching the text
    so far), then ``params.grammar`` from the trigger on (module docstring)."""

    def __init__(self, params: Any, model: Any, trigger_tokens: list[int]) -> None:
        self.params = params
        self.model = model
        self.free = ChainSampler(dataclasses.replace(params, grammar=None), model)
        self.strict: ChainSampler | None = None  # the grammar's, once triggered
        self.trigger_tokens = frozenset(trigger_tokens)
        self.patterns = [re.compile(p) for p in TRIGGERS]
        self.written = b""
        self.gave_up = False

    def sample(self, ctx: Any, index: int) -> int:
        if self.strict is not None:
            return self.strict.sample(ctx, index)
        token = self.free.sample(ctx, index)
        if self.gave_up:
            return token
        piece = token_piece(self.model.vocab, token, special=True)
        text = (self.written + piece).decode("utf-8", "replace")
        cut = len(text) - len(piece.decode("utf-8", "replace"))  # where this token's text starts
        start = cut if token in self.trigger_tokens else self._trigger_start(text)
        self.written += piece
        if start is None:
            return token
        log.debug("a tool call opens: %r", text[start:])
        strict = self._grammar()
        if strict.feed(text[start:]):
            self.strict = strict
            return token
        # the token runs on past what the grammar allows: take the grammar's token instead
        strict = self._grammar()
        if not strict.feed(text[start:max(start, cut)]):
            log.info("the answer opened a tool call the grammar does not allow (%r); it goes "
                     "on without the grammar", text[start:][:80])
            self.gave_up = True
            return token
        self.strict = strict
        return strict.sample(ctx, index)

    def allows(self, token: int) -> bool:
        return (self.strict or self.free).allows(token)

    def accept(self, token: int) -> None:
        (self.strict or self.free).accept(token)

    def _trigger_start(self, text: str) -> int | None:
        """Where the first matching pattern's first group starts (the call's first
        character), as llama.cpp's lazy grammar takes it; None when none matches."""
        for pattern in self.patterns:
            if (match := pattern.fullmatch(text)) is not None:
                return next((match.start(i) for i in range(1, (match.re.groups or 0) + 1)
                             if match.group(i)), match.start())
        return None

    def _grammar(self) -> ChainSampler:
        return ChainSampler(dataclasses.replace(self.params, grammar_lazy=False), self.model)
