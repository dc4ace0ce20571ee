"""Which region of the embedded model's one KV cache holds which tokens (``local_engine.py``).

One llama.cpp context holds one sequence per slot in a shared cache of ``n_ctx`` tokens
(``kv_unified``): any one answer may use the whole context, and together they never hold
more. A request takes the free slot whose cache its prompt mostly continues (the same
conversation: its next turn pays for the new user message only), and a new conversation copies
the cells of the longest prefix another slot holds (the system prompt, a playbook's tool list)
instead of evaluating them again. When a step needs more room than is free, the caches of idle
slots are dropped, least recently used first. llama.cpp's server does the same with
``--parallel`` and ``--cache-prompt``.

Four slots hold four prefixes; a playbook has one per stage (its instructions and tools). The
prompts the engine computes ahead (``SamplingParams.prompt_only``) are therefore copied out of
the KV cache into memory (``SavedPrompts``, llama.cpp's ``llama_state_seq_*`` API; about 28 KB a
token for the 1.5B model) and copied back into whichever slot a later prompt starting with them
takes: ~10 ms for a prefix that takes ~2.5 s to compute on 2 cores (307 tokens).

Every method runs on the engine thread, with the model lock held where it touches the cache.
"""

from __future__ import annotations

import ctypes
import logging
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["SAVED_BYTES", "SHARE_MIN_TOKENS", "KVSlots", "SavedPrompts", "Slot", "pick_slot"]

SHARE_MIN_TOKENS = 16  # a shorter prefix is not worth copying from another slot
SAVED_BYTES = 256 << 20  # memory for saved prompts (the 1.5B model: ~9,000 tokens)

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    id: int  # the llama.cpp sequence id
    tokens: list[int]  # what its KV region holds, position by position
    busy: bool = False
    used_at: float = 0.0


@dataclass(eq=False)
class Saved:
    tokens: list[int]  # the prompt whose cache ``data`` holds
    data: Any  # a ctypes byte array from llama_state_seq_get_data
    used_at: float = field(default_factory=time.monotonic)


class SavedPrompts:
    """Prompts' KV caches copied into memory, at most ``budget`` bytes (the least recently
    used are dropped first); ``ctx`` is the llama.cpp context, ``memory`` its KV memory."""

    def __init__(self, llama_cpp: Any, ctx: Any, memory: Any, budget: int = SAVED_BYTES) -> None:
        self._c = llama_cpp
        self._ctx = ctx
        self._memory = memory
        self.budget = budget
        self.entries: list[Saved] = []

    def held(self) -> int:
        return sum(len(e.data) for e in self.entries)

    def save(self, slot: Slot) -> None:
        """Copy what ``slot`` holds; a saved prompt it continues is replaced, and nothing is
        saved when a saved prompt already continues it."""
        tokens = list(slot.tokens)
        if not tokens or any(_common(e.tokens, tokens) == len(tokens) for e in self.entries):
            return
        size = self._c.llama_state_seq_get_size(self._ctx, slot.id)
        if size > self.budget:
            return
        data = (ctypes.c_uint8 * size)()
        if self._c.llama_state_seq_get_data(self._ctx, data, size, slot.id) != size:
            return
        self.entries = [e for e in self.entries if _common(e.tokens, tokens) < len(e.tokens)]
        self.entries.append(Saved(tokens, data))
        while self.held() > self.budget:
            self.entries.remove(min(self.entries, key=lambda e: e.used_at))
        log.debug("slot %d: prompt of %d tokens saved (%d saved, %.1f MB)", slot.id,
                  len(tokens), len(self.entries), self.held() / 1e6)

    def restore(self, entry: Saved, slot: Slot, keep: int) -> bool:
        """Put the first ``keep`` tokens of ``entry`` into ``slot`` (whatever it held is
        dropped); False when llama.cpp found no room for them (the slot is then empty)."""
        entry.used_at = time.monotonic()
        self._c.llama_memory_seq_rm(self._memory, slot.id, -1, -1)
        slot.tokens.clear()
        if not self._c.llama_state_seq_set_data(self._ctx, entry.data, len(entry.data), slot.id):
            return False
        if not self._c.llama_memory_seq_rm(self._memory, slot.id, keep, -1):
            self._c.llama_memory_seq_rm(self._memory, slot.id, -1, -1)
            return False
        slot.tokens.extend(entry.tokens[:keep])
        return True


Holder = TypeVar("Holder", Slot, Saved)


class KVSlots:
    """The slots of one context: ``llama_cpp`` (the bindings), the context ``ctx``, ``count``
    sequences, ``n_ctx`` cells shared by all, and the prompts saved in memory."""

    def __init__(self, llama_cpp: Any, ctx: Any, count: int, n_ctx: int,
                 saved_bytes: int = SAVED_BYTES) -> None:
        self._c = llama_cpp
        self._memory = llama_cpp.llama_get_memory(ctx)
        self.slots = [Slot(i, []) for i in range(count)]
        self.n_ctx = n_ctx
        self.saved = SavedPrompts(llama_cpp, ctx, self._memory, saved_bytes)

    def free(self) -> int:
        return sum(not s.busy for s in self.slots)

    def claim(self, prompt: list[int]) -> Slot | None:
        """A free slot for ``prompt`` (``pick_slot``), marked busy; None when all are busy."""
        free = [s for s in self.slots if not s.busy]
        if not free:
            return None
        slot = pick_slot(free, prompt)
        slot.busy = True
        return slot

    def release(self, slot: Slot) -> None:
        slot.busy = False
        slot.used_at = time.monotonic()

    def reuse(self, slot: Slot, prompt: list[int]) -> int:
        """Keep what ``slot`` holds of ``prompt`` (or copy a longer prefix from another slot,
        or from the saved prompts) and drop the rest; returns how many of the prompt's tokens
        are cached (at most all but the last, whose logits the first step needs)."""
        keep = min(_common(slot.tokens, prompt), len(prompt) - 1)
        donor, shared = _longest_prefix([s for s in self.slots if s is not slot], prompt)
        entry, stored = _longest_prefix(self.saved.entries, prompt)
        if entry is not None and stored > max(keep, shared) + SHARE_MIN_TOKENS:
            if self.saved.restore(entry, slot, stored):
                log.debug("slot %d: %d tokens from a saved prompt", slot.id, stored)
                return stored
            keep = 0  # the slot was emptied
        if donor is not None and shared > keep + SHARE_MIN_TOKENS:
            self._c.llama_memory_seq_rm(self._memory, slot.id, -1, -1)
            self._c.llama_memory_seq_cp(self._memory, donor.id, slot.id, 0, shared)
            slot.tokens[:] = prompt[:shared]
            keep = shared
        elif not self._c.llama_memory_seq_rm(self._memory, slot.id, keep, -1):
            keep = 0
            self._c.llama_memory_seq_rm(self._memory, slot.id, -1, -1)
        del slot.tokens[keep:]
        return keep

    def forget(self, slot: Slot) -> None:
        """Drop all ``slot`` holds (after a failed step its cells are unknown)."""
        self._c.llama_memory_seq_rm(self._memory, slot.id, -1, -1)
        slot.tokens.clear()

    def held(self) -> int:
        return sum(len(s.tokens) for s in self.slots)

    def make_room(self) -> None:
        """Drop idle slots' caches, least recently used first, until the cached tokens fit
        (``slot.tokens`` already counting the step's batch)."""
        used = self.held()
        if used <= self.n_ctx:  # the usual case, every step: nothing to drop
            return
        idle = sorted((s for s in self.slots if not s.busy and s.tokens),
                      key=lambda s: s.used_at)
        while used > self.n_ctx and idle:
            slot = idle.pop(0)
            used -= len(slot.tokens)
            self.forget(slot)
            log.debug("slot %d: cache dropped for room", slot.id)


def pick_slot(free: list[Slot], prompt: list[int]) -> Slot:
    """The slot whose cache this prompt mostly continues (the same conversation: at least
    half of what it holds is a prefix of the prompt), the longest such; else the least
    recently used one. Sharing only the system prompt is not enough: taking that slot would
    throw away another conversation's history, which it would pay for on its next turn."""
    matches = [(common, s) for s in free
               if (common := _common(s.tokens, prompt)) and 2 * common >= len(s.tokens)]
    if matches:
        return max(matches, key=lambda m: m[0])[1]
    return min(free, key=lambda s: s.used_at)


def _longest_prefix(holders: list[Holder], prompt: list[int]) -> tuple[Holder | None, int]:
    """The holder (a slot, a saved prompt) whose tokens share the longest prefix with
    ``prompt``, and its length (at most all but the prompt's last token)."""
    best: tuple[Holder | None, int] = (None, 0)
    for holder in holders:
        common = min(_common(holder.tokens, prompt), len(prompt) - 1)
        if common > best[1]:
            best = (holder, common)
    return best


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
