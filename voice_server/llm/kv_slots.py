"""Which region of the embedded model's one KV cache holds which tokens (``local_engine.py``).

One llama.cpp context holds one sequence per slot in a shared cache of ``n_ctx`` tokens
(``kv_unified``): any one answer may use the whole context, and together they never hold
more. A request takes the free slot whose cache its prompt mostly continues (the same
conversation: its next turn pays for the new user message only), and a new conversation copies
the cells of the longest prefix another slot holds (the system prompt, a playbook's tool list)
instead of evaluating them again. When a step needs more room than is free, the caches of idle
slots are dropped, least recently used first. llama.cpp's server does the same with
``--parallel`` and ``--cache-prompt``.

Every method runs on the engine thread, with the model lock held where it touches the cache.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["SHARE_MIN_TOKENS", "KVSlots", "Slot", "pick_slot"]

SHARE_MIN_TOKENS = 16  # a shorter prefix is not worth copying from another slot

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Slot:
    id: int  # the llama.cpp sequence id
    tokens: list[int]  # what its KV region holds, position by position
    busy: bool = False
    used_at: float = 0.0


class KVSlots:
    """The slots of one context: ``llama_cpp`` (the bindings), its memory handle, ``count``
    sequences, ``n_ctx`` cells shared by all."""

    def __init__(self, llama_cpp: Any, memory: Any, count: int, n_ctx: int) -> None:
        self._c = llama_cpp
        self._memory = memory
        self.slots = [Slot(i, []) for i in range(count)]
        self.n_ctx = n_ctx

    def any_free(self) -> bool:
        return any(not s.busy for s in self.slots)

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
        """Keep what ``slot`` holds of ``prompt`` (or copy a longer prefix from another slot)
        and drop the rest; returns how many of the prompt's tokens are cached (at most all but
        the last, whose logits the first step needs)."""
        keep = min(_common(slot.tokens, prompt), len(prompt) - 1)
        donor, shared = self._best_prefix(slot, prompt)
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

    def _best_prefix(self, slot: Slot, prompt: list[int]) -> tuple[Slot | None, int]:
        """The other slot sharing the longest prefix with ``prompt``, and its length."""
        best: tuple[Slot | None, int] = (None, 0)
        for other in self.slots:
            if other is not slot:
                common = min(_common(other.tokens, prompt), len(prompt) - 1)
                if common > best[1]:
                    best = (other, common)
        return best


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


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
