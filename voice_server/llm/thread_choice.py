"""All the engine's threads, or one? Learnt from the steps' own times.

llama.cpp's threads wait for each other at every layer, so a thread that another program
keeps off its core holds every step up. Alone on 2 cores the default 1.5B model decodes a
token in ~39 ms on two threads and ~58 ms on one; beside a program that keeps one core busy
(a build, another model, a busy browser tab) two threads took ~156 ms a token and one ~91 ms,
and beside a second llama.cpp process on two threads 254 against 159 ms (one-off script, 2-core
AMD EPYC, 2026-11-27). A newcomer whose machine ran another model saw answers cut off by the
LLM timeout. The server cannot see other programs' threads, but it sees its own steps slow
down: ``ThreadChoice`` keeps a running mean of the step time in the current mode and now and
then times ``PROBE_STEPS`` steps in the other mode (a *probe*); a probe whose fastest step is
clearly faster than the usual step switches the mode (one step alone was at the mercy of one
scheduler hiccup: a CI run kept one thread after the busy loop had ended). A probe is never a
step of an answer's first words (someone waits for them), so on a quiet machine probing costs
~60 ms per ``PROBE_EVERY`` later tokens (speech is slower than the model by far) and no
latency. Only steps of one answer decoding one token, with the compute pool idle, are timed:
those are the steps that ask for all threads (local_engine.py), and alike enough to compare.
"""

from __future__ import annotations

import logging

__all__ = ["PROBE_EVERY", "PROBE_STEPS", "SWITCH_BELOW", "ThreadChoice"]

PROBE_EVERY = 32  # timed steps between two probes of the other mode
PROBE_STEPS = 3  # steps of one probe; its fastest one is compared
SWITCH_BELOW = 0.85  # a probe this much faster than the usual step switches the mode
_WEIGHT = 0.2  # of the newest step in the running mean

log = logging.getLogger(__name__)


class ThreadChoice:
    """The threads of the engine's next step that may use them all; fed back with the time
    of each timed step (sans-I/O: the engine measures and sets the threads)."""

    def __init__(self, threads: int, *, probe_every: int = PROBE_EVERY) -> None:
        self.threads = threads
        self.narrow = False  # one thread is faster now
        self._probe_every = probe_every
        self._since_probe = 0
        self._probing = False  # the step chosen last is a probe's
        self._probe_left = 0  # steps of the probe under way still to time
        self._probe_best = float("inf")
        self._usual: dict[bool, float | None] = {False: None, True: None}  # narrow -> seconds

    def choose(self, *, may_probe: bool) -> int:
        """Threads for a step that may use them all; ``may_probe``: it is a timed step that
        no one waits for."""
        if self.threads <= 1:
            return self.threads
        if may_probe and not self._probe_left and self._since_probe >= self._probe_every \
                and self._usual[self.narrow] is not None:
            self._probe_left, self._probe_best = PROBE_STEPS, float("inf")
        self._probing = may_probe and self._probe_left > 0
        return 1 if self.narrow != self._probing else self.threads

    def timed(self, threads: int, seconds: float) -> None:
        """A timed step took ``seconds`` on ``threads``."""
        if self.threads <= 1:
            return
        narrow = threads < self.threads
        if self._probing:
            self._probing = False
            self._probe_best = min(self._probe_best, seconds)
            self._probe_left -= 1
            if self._probe_left:
                return
            self._since_probe = 0
            usual, seconds = self._usual[self.narrow], self._probe_best
            self._usual[narrow] = seconds
            if usual is not None and seconds < usual * SWITCH_BELOW:
                log.info("llm: %s (a step %.0f ms, against %.0f ms on %s)",
                         "one thread is faster now: another program is using the CPU"
                         if narrow else f"{self.threads} threads are faster again",
                         seconds * 1000, usual * 1000,
                         f"{self.threads} threads" if narrow else "one")
                self.narrow = narrow
            return
        self._since_probe += 1
        old = self._usual[narrow]
        self._usual[narrow] = seconds if old is None else old + (seconds - old) * _WEIGHT
