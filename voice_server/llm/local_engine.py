"""Several answers at once on one embedded llama.cpp model: per-session KV slots and
first-piece-first scheduling, so that 4 sessions on 2 cores each hear their answer start
soon.

One llama.cpp context holds ``slots`` sequences in one shared KV cache of ``n_ctx`` tokens;
``kv_slots.py`` keeps which holds what, so that a session's next turn pays for its new message
only and a new conversation shares the system prompt's cells. With one shared cache (the
high-level ``Llama`` object), four sessions took turns evicting each other and paid for their
whole history every turn (~4 ms per token on 2 cores).

One thread runs the model, one decode step at a time. A step is chosen *first piece first*:
while any answer is among its first ``urgent_tokens`` tokens (its prompt included), only those
answers are decoded; otherwise every answer whose reader keeps up is decoded, in one batch.
On 2 cores a batch of 4 costs about 3.6x one token, so batching is not the gain; the order is:
a new question's first words no longer wait behind the rest of another session's answer,
which its listener will not hear for seconds anyway. An answer whose reader stops reading (the
bounded hand-off of ``ahead`` tokens: the voice turn pauses the LLM while Piper synthesizes its
first piece) is skipped, never waited for.

The engine shares 2 cores with speech-to-text and text-to-speech (the compute pool, passed as
``others``), and gives way to them:

- a step that only continues answers already speaking (no answer in its first tokens) waits
  while the pool has *urgent* work (a final transcript, a first piece: someone waits in
  silence), for at most ``GIVE_WAY_S`` at a time, so a busy pool slows the rest of an answer
  but never stops it;
- the engine uses ``n_threads`` while the pool is idle for a prompt, and for decoding while
  it serves one answer alone (its first piece has nothing computed beside it), and one thread
  otherwise: llama.cpp's threads wait for each other at every layer, and on 2 busy cores the
  second one is often descheduled (a token then took 25 ms p50, p99 137 ms, against 19 ms
  with one thread; 4 sessions decoding on two threads whenever the pool was idle answered
  ~1 s later at p50). Alone on the cores two threads are faster for every bundled model (a
  token, p50, 1 -> 2 threads: SmolLM2-135M 12.0 -> 8.0 ms, Qwen2.5-Coder-0.5B 31.8 -> 20.3 ms,
  -1.5B 51.6 -> 35.8 ms on a 2-core AMD EPYC).

A request may be *prompt only* (``SamplingParams.prompt_only``: a playbook's stage prompts,
computed before a call needs them): it runs only when no answer can step and the pool is idle,
``BACKGROUND_CHUNK`` tokens a step, one at a time, and gives its slot up to a question that
finds none free; its prompt's cache is then saved in memory (``kv_slots.SavedPrompts``) and it
ends with no text. A step under way is not interrupted: the server asks for such prompts only
while no call is live (server/warm.py). During calls, steps on two threads collided with
speech-to-text starting and took seconds, and the question after them waited (voice-to-voice
p95 2.8-3.2 s instead of 1.2-1.3 s); on one thread, 8 tokens a step, turns were still ~0.2 s
slower at p95 and three playbooks took 3 minutes.

A *prefill* is a prompt-only request made during a call, while the user speaks: the
conversation's prompt up to their words so far (server/listening.py). It stops before the
user message's end-of-turn token (what follows depends on words not yet heard), takes
``PREFILL_CHUNK`` tokens a step under the same rule, is kept in its slot only, and ends when a
question is admitted: its tokens stay in the slot, and the question, which continues them, pays
for the rest only.

Everything touching the context runs on the engine thread (admission, tokenizing, decoding,
sampling); readers only enqueue, cancel, and give back hand-off credit.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import replace
from typing import Any

from ..compat import llama_batch, llama_context, llama_model
from .errors import LLMBadRequest, LLMError
from .kv_slots import KVSlots, Slot
from .local_decoding import OPEN, StopText, chat_formatter, closed_json
from .local_requests import Deliver, Generation, OtherWork, SamplingParams
from .local_sampling import sampler, token_piece
from .thread_choice import ThreadChoice
from .types import StreamEvent, Usage

__all__ = ["GIVE_WAY_S", "LlamaEngine"]

GIVE_WAY_S = 0.2  # longest wait of a later-tokens step for urgent STT/TTS work
BUSY_PROMPT_CHUNK = 4  # prompt tokens a step takes on one thread while the pool works
BACKGROUND_CHUNK = 32  # prompt tokens a step of a prompt-only request takes (~0.3 s, 1.5B)
PREFILL_CHUNK = 4  # ... of a prefill: the user's pause may start speech to text at any moment

log = logging.getLogger(__name__)


class LlamaEngine:
    """Owns one llama.cpp context with ``slots`` KV regions and the thread that runs it."""

    def __init__(self, llama: Any, *, slots: int = 4, n_ctx: int = 8192, n_threads: int = 2,
                 ahead: int = 4, urgent_tokens: int = 12, n_batch: int = 512,
                 others: OtherWork | None = None) -> None:
        import llama_cpp

        self._c = llama_cpp
        self._llama = llama
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = slots
        params.kv_unified = True
        params.n_threads = params.n_threads_batch = 1  # see the module docstring
        self._ctx = llama_context(llama, params)
        self._batch = llama_batch(n_batch)
        self._vocab = llama_cpp.llama_model_get_vocab(llama_model(llama).model)
        self._json_ends = [t for text in (b",", b"}") for t in llama.tokenize(
            text, add_bos=False, special=False)[:1]]  # what closes a part (json_template)
        self._eos = next((t for t in (llama_cpp.llama_vocab_eos(self._vocab),
                                      llama_cpp.llama_vocab_eot(self._vocab)) if t >= 0), None)
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx.ctx))  # shared by all slots
        self._kv = KVSlots(llama_cpp, self._ctx.ctx, slots, self.n_ctx)
        self._n_batch = n_batch
        self._ahead = ahead
        self._urgent = urgent_tokens
        self._n_threads = n_threads
        self._threads_now = 1
        self.thread_choice = ThreadChoice(n_threads)
        self._others = others
        self._giving_way_since: float | None = None
        self._format = chat_formatter(llama)
        tag = llama.tokenize(OPEN.encode(), add_bos=False, special=True)
        self._trigger_tokens = tag if len(tag) == 1 else []  # "<tool_call>" is one token
        self._waiting: collections.deque[Generation] = collections.deque()
        self._active: list[Generation] = []
        self._ended: list[Generation] = []  # prefills a question ended, their readers untold
        self._cond = threading.Condition()
        self._closed = False
        self.model_lock = threading.Lock()  # held per step; other users of the model take it too
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
        self._thread.start()

    # ---- reader side (any thread) -----------------------------------------------------------
    def submit(self, messages: list[dict[str, Any]], params: SamplingParams,
               deliver: Deliver, tools: list[dict[str, Any]] | None = None) -> Generation:
        gen = Generation(messages, params, deliver, self._ahead, tools)
        with self._cond:
            if self._closed:
                raise LLMError("the local model is closed", provider="local")
            self._waiting.append(gen)
            self._cond.notify()
        return gen

    def consumed(self, gen: Generation) -> None:
        """The reader took one text delta: the answer may run one token further ahead."""
        with self._cond:
            gen.credit += 1
            self._cond.notify()

    def cancel(self, gen: Generation) -> None:
        """Stop an answer; its slot (and cached prompt) is free for the next request."""
        with self._cond:
            if gen.finished:
                return
            gen.finished = True
            if gen in self._waiting:
                self._waiting.remove(gen)
            self._release(gen)
            self._cond.notify()

    @property
    def busy(self) -> bool:
        with self._cond:
            return bool(self._active or self._waiting)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        for gen in [*self._active, *self._waiting]:
            gen.finished = True
            gen.deliver(LLMError("the local model was closed", provider="local"))
        self._batch.close()
        self._ctx.close()

    # ---- engine thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._ready():
                    self._cond.wait()
                if self._closed:
                    return
                admitted = self._claim_slots()
                ended, self._ended = self._ended, []
            for gen in ended:
                gen.deliver(StreamEvent(done=True, finish_reason="stop",
                                        usage=Usage(len(gen.prompt), 0)))
            for gen, slot in admitted:  # cache trimming, outside the lock
                self._admit(gen, slot)
            with self._cond:
                group, urgent = self._choose()
                if not group or not urgent and self._give_way():
                    self._cond.wait(0.005 if group else 0.02)  # (a prompt-only one waits)
                    continue
            threads, timed = self._use_threads(group, urgent)
            first = group[0][0]
            chunk = (PREFILL_CHUNK if first.prefill else BACKGROUND_CHUNK if first.background
                     else BUSY_PROMPT_CHUNK
                     if threads < self._n_threads and not self.thread_choice.narrow
                     else self._n_batch)
            with self.model_lock:
                started = time.perf_counter()
                self._step(group, chunk)
                if timed:
                    self.thread_choice.timed(threads, time.perf_counter() - started)

    def _ready(self) -> bool:
        if self._next_waiting() is not None:
            return True
        return any(self._runnable(g) for g in self._active)

    def _next_waiting(self) -> Generation | None:
        """The request to admit next (called locked): a question first, taking the slot of a
        prompt-only request when none is free; a prompt-only one alone, leaving a slot free."""
        front = next((g for g in self._waiting if not g.background), None)
        if front is not None:
            if self._kv.free() or any(g.background for g in self._active):
                return front
            return None
        if self._waiting and self._kv.free() >= 2 and not any(g.background
                                                               for g in self._active):
            return self._waiting[0]
        return None

    def _runnable(self, gen: Generation) -> bool:
        return not gen.finished and gen.slot is not None and (
            bool(gen.pending) or (gen.last is not None and gen.credit > 0))

    def _claim_slots(self) -> list[tuple[Generation, Slot]]:
        """Give waiting requests a free slot each (called with the lock held; a prompt of a
        few hundred tokens takes ~1 ms to format and tokenize)."""
        claimed = []
        while (gen := self._next_waiting()) is not None:
            if not gen.background:
                self._end_prefills()
            if not self._kv.free():  # a question takes a prompt-only request's slot
                self._put_back(next(g for g in self._active if g.background))
            self._waiting.remove(gen)
            if not gen.prompt and not self._tokenize(gen):
                continue
            slot = self._kv.claim(gen.prompt)
            assert slot is not None  # one was free, under the lock
            gen.slot = slot
            self._active.append(gen)
            claimed.append((gen, slot))
        return claimed

    def _end_prefills(self) -> None:
        """A question came: prefills, under way or waiting, are done (called locked; the
        tokens computed stay in their slots; ``_run`` tells their readers, unlocked). One left
        waiting would later take the slot back to the words it had, and drop the answer's
        tokens from it."""
        for gen in [g for g in (*self._active, *self._waiting) if g.prefill]:
            if gen in self._waiting:
                self._waiting.remove(gen)
            gen.finished = True
            self._release(gen)
            self._ended.append(gen)

    def _put_back(self, gen: Generation) -> None:
        """Return a prompt-only request to the queue (its tokens computed so far stay in the
        slot's cache for its next try, unless the question takes them)."""
        self._release(gen)
        gen.pending = []
        self._waiting.append(gen)

    def _tokenize(self, gen: Generation) -> bool:
        try:
            prompt, stop, add_bos = self._format(gen.messages, gen.tools)
            gen.prompt = self._llama.tokenize((prompt + gen.params.prefix).encode("utf-8"),
                                              add_bos=add_bos, special=True)
        except Exception as exc:  # a template that rejects the messages
            gen.finished = True
            gen.deliver(LLMBadRequest(f"cannot format the prompt: {exc}", provider="local"))
            return False
        gen.text = StopText((*gen.params.stop, *stop))
        if gen.prefill:  # up to the user's words: their end depends on words not yet heard
            ends = [i for i, t in enumerate(gen.prompt) if self._c.llama_vocab_is_eog(
                self._vocab, t)]
            gen.prompt = gen.prompt[:ends[-1]] if ends else gen.prompt
        return True

    def _admit(self, gen: Generation, slot: Slot) -> None:
        if gen.finished:  # cancelled meanwhile
            return
        if not gen.prompt:  # a template that renders nothing
            self._finish(gen, error=LLMBadRequest("the prompt is empty", provider="local"))
            return
        if len(gen.prompt) >= self.n_ctx:
            self._finish(gen, error=LLMBadRequest(
                f"prompt too long for the local model: {len(gen.prompt)} tokens, the context "
                f"holds {self.n_ctx}", provider="local"))
            return
        with self.model_lock:
            keep = self._kv.reuse(slot, gen.prompt)
        gen.cached = keep
        gen.pending = gen.prompt[keep:]
        log.debug("slot %d: prompt of %d tokens, %d cached", slot.id, len(gen.prompt), keep)
        gen.max_tokens = min(gen.params.max_tokens, self.n_ctx - len(gen.prompt))
        if gen.background:  # nothing is sampled
            return
        try:
            gen.sampler = sampler(gen.params, llama_model(self._llama), self._trigger_tokens)
        except Exception as exc:  # a grammar llama.cpp does not accept
            self._finish(gen, error=LLMBadRequest(f"cannot use the tools' grammar: {exc}",
                                                  provider="local"))

    def _choose(self) -> tuple[list[tuple[Generation, Slot]], bool]:
        """First piece first: answers still in their first tokens go alone (called locked).
        Returns the group and whether it is urgent."""
        runnable = [g for g in self._active if self._runnable(g)]
        front = [g for g in runnable if not g.background]
        urgent = [g for g in front if g.produced < self._urgent]
        if not front and (self._others is None or not self._others.running_jobs):
            front = runnable[:1]  # a prompt-only request, when nothing else would run
        return [(g, g.slot) for g in urgent or front if g.slot is not None], bool(urgent)

    def _give_way(self) -> bool:
        """Should a later-tokens step wait for the pool's urgent work (module docstring)?"""
        if self._others is None or not self._others.urgent_jobs:
            self._giving_way_since = None
            return False
        now = time.monotonic()
        if self._giving_way_since is None:
            self._giving_way_since = now
        if now - self._giving_way_since < GIVE_WAY_S:
            return True
        self._giving_way_since = None  # one step, then give way again
        return False

    def _use_threads(self, group: list[tuple[Generation, Slot]],
                     urgent: bool) -> tuple[int, bool]:
        """Set the step's threads; return them and whether the step is timed for the
        ``thread_choice`` (one answer's token, all threads allowed). A prompt on one thread
        (the pool busy) goes ``BUSY_PROMPT_CHUNK`` tokens a step, to take both cores once the
        pool is idle: the end-of-turn check (~100 ms) starts with a question's prompt and kept
        12 tokens of the 1.5B on one thread (330 ms; two alone 172, two beside a busy core
        518); not when one thread is faster anyway (thread_choice.py)."""
        idle = self._others is None or not self._others.running_jobs
        alone = len(self._active) == 1  # several answers at once: their STT/TTS come and go
        prompt = any(gen.pending for gen, _ in group)
        timed = idle and alone and not prompt and len(group) == 1
        threads = (self.thread_choice.choose(timed=timed, urgent=urgent)
                   if idle and (prompt or alone) else 1)
        if threads != self._threads_now:
            self._c.llama_set_n_threads(self._ctx.ctx, threads, threads)
            self._threads_now = threads
        return threads, timed

    def _step(self, group: list[tuple[Generation, Slot]], prompt_chunk: int) -> None:
        """Decode one batch, at most ``prompt_chunk`` tokens of each prompt; the slots were
        taken under the lock (a reader may cancel its answer meanwhile; only this thread
        reuses a slot, so its cache stays consistent)."""
        b = self._batch.batch
        b.n_tokens = 0
        outputs: list[tuple[Generation, int]] = []
        for gen, slot in sorted(group, key=lambda pair: bool(pair[0].pending)):
            room = self._n_batch - b.n_tokens  # single tokens first, then prompt chunks
            if room <= 0:
                break
            feed = gen.pending[:min(room, prompt_chunk)] if gen.pending else [gen.last]
            for i, token in enumerate(feed):
                j = b.n_tokens
                b.token[j] = token
                b.pos[j] = len(slot.tokens) + i
                b.seq_id[j][0] = slot.id
                b.n_seq_id[j] = 1
                b.logits[j] = False
                b.n_tokens += 1
            slot.tokens.extend(feed)
            if gen.pending:
                gen.pending = gen.pending[len(feed):]
            if not gen.pending and not gen.background:
                b.logits[b.n_tokens - 1] = True
                outputs.append((gen, b.n_tokens - 1))
        self._kv.make_room()
        code = self._c.llama_decode(self._ctx.ctx, b)
        if code != 0:
            error = LLMError(
                "the local model's context is full: the answers in progress hold "
                f"{self._kv.held()} tokens, it holds {self.n_ctx}"
                if code == 1 else f"local model failed: llama_decode returned {code}",
                provider="local")
            for gen, slot in group:  # their cached tokens are unknown now: forget them
                self._kv.forget(slot)
                self._finish(gen, error=error)
            return
        for gen, slot in group:
            if gen.background and not gen.pending and not gen.finished:
                if gen.params.save_prompt:
                    self._kv.saved.save(slot)
                self._finish(gen)
        for gen, index in outputs:
            if gen.finished:  # cancelled during the step
                gen.sampler = None  # freed here, on the thread that samples with it
                continue
            self._take(gen, gen.sampler.sample(self._ctx.ctx, index))

    def _take(self, gen: Generation, token: int) -> None:
        gen.last = token
        if self._c.llama_vocab_is_eog(self._vocab, token):
            if gen.segments:  # this part is complete (its grammar allows nothing more)
                self._next_segment(gen)
            else:
                self._finish(gen, reason="stop")
            return
        gen.produced += 1
        piece = token_piece(self._vocab, token)
        self._deliver(gen, piece)
        if gen.params.segments and not gen.finished:
            gen.part += piece
            self._end_part(gen, token)

    def _end_part(self, gen: Generation, token: int) -> None:
        """End a part of an answer written in parts (``json_template``) once its end is
        certain: its last tokens are read in one batch with the next part's given text (or the
        answer ends), not a step each (~80 ms with the 1.5B model on 2 cores; seven of a
        booking note's 22 steps). A part's grammar ends with its "," or "}": once the grammar
        may end, nothing else may follow; once the value is a closed JSON value (``null``, a
        string; not a number, which may go on), its "," or "}" is given."""
        sampler, eos = gen.sampler, self._eos
        if sampler is None or eos is None:
            return
        given = [token]
        if not sampler.allows(eos):
            if not closed_json(gen.part.decode("utf-8", "replace")):
                return
            end = next((t for t in self._json_ends if sampler.allows(t)), None)
            if end is None:
                return
            sampler.accept(end)
            given.append(end)
            gen.produced += 1
            self._deliver(gen, token_piece(self._vocab, end))
            if gen.finished:
                return
        if gen.segments:
            self._next_segment(gen, given)
        else:
            self._finish(gen, reason="stop")

    def _next_segment(self, gen: Generation, last: list[int] | None = None) -> None:
        """Read the next part's given text (one batch, like a prompt; after ``last``, the
        previous part's last tokens, not yet decoded) and switch grammars."""
        given, grammar = gen.segments.pop(0)
        gen.last = None  # an end-of-text token is not part of the answer
        gen.sampler = None  # freed here, on the thread that samples with it
        if grammar is None:  # the answer ends with this text: nothing more to compute
            self._deliver(gen, given.encode("utf-8"))
            self._finish(gen, reason="stop")
            return
        gen.pending = [*(last or ()), *self._llama.tokenize(
            given.encode("utf-8"), add_bos=False, special=False)]
        gen.part = b""
        try:
            gen.sampler = sampler(replace(gen.params, grammar=grammar, grammar_lazy=False),
                                  llama_model(self._llama), self._trigger_tokens)
        except Exception as exc:
            self._finish(gen, error=LLMBadRequest(f"cannot use the answer's grammar: {exc}",
                                                  provider="local"))
            return
        self._deliver(gen, given.encode("utf-8"))

    def _deliver(self, gen: Generation, piece: bytes) -> None:
        text, stopped = gen.text.push(piece)
        if text:
            with self._cond:
                gen.credit -= 1
            gen.deliver(text)
        if stopped:
            self._finish(gen, reason="stop", flush=False)
        elif gen.produced >= gen.max_tokens:
            self._finish(gen, reason="length")

    def _finish(self, gen: Generation, *, reason: str = "stop", flush: bool = True,
                error: LLMError | None = None) -> None:
        with self._cond:
            if gen.finished:
                return
            gen.finished = True
            self._release(gen)
        gen.sampler = None  # freed here, on the thread that samples with it
        if error is not None:
            gen.deliver(error)
            return
        if flush and (rest := gen.text.flush()):
            gen.deliver(rest)
        gen.deliver(StreamEvent(done=True, finish_reason=reason,
                                usage=Usage(len(gen.prompt), gen.produced, gen.cached)))

    def _release(self, gen: Generation) -> None:
        """Called with the lock held."""
        if gen in self._active:
            self._active.remove(gen)
        slot, gen.slot = gen.slot, None
        if slot is not None:
            self._kv.release(slot)

