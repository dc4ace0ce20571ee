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
scheduler hiccup: a CI run kept one thread after the busy loop had ended). On a quiet machine
a probe is never a step of an answer's first words (someone waits for them), so probing costs
~60 ms per ``PROBE_EVERY`` later tokens (speech is slower than the model by far) and no
latency. Inside the server the collapse was far worse than in a script beside a lone busy
loop (why was not pinned down; the server's worker processes share the cores): two llama.cpp
threads took 1.5-3.2 s a step (one: ~48 ms), so answers timed out at 30 s with 9-19 words said.
Steps that slow are probed after ``PROBE_AFTER_S`` whatever their count, first words too.
A probe into the collapse costs a collapsed step (~1.5-3 s), so it ends at its first step
when that is far slower than the usual one, and each failed probe doubles the wait for the
next (up to ``MAX_BACK_OFF``); the wait starts again when the usual step itself slows.
Only steps of one answer decoding one token, with the compute pool idle, are timed: those are
the steps that ask for all threads (local_engine.py), and alike enough to compare.
"""

from __future__ import annotations

import logging
import time

__all__ = ["GIVE_UP_ABOVE", "MAX_BACK_OFF", "PROBE_AFTER_S", "PROBE_EVERY", "PROBE_STEPS",
           "SLOW_STEP_S", "SWITCH_BELOW", "ThreadChoice"]

PROBE_EVERY = 32  # timed steps between two probes of the other mode ...
PROBE_AFTER_S = 2.0  # ... or this long, when steps are slow
PROBE_STEPS = 3  # steps of one probe; its fastest one is compared
SLOW_STEP_S = 0.25  # a usual step this slow is probed even among an answer's first words
SWITCH_BELOW = 0.85  # a probe this much faster than the usual step switches the mode
GIVE_UP_ABOVE = 2.0  # a probe step this much slower than the usual one ends the probe
MAX_BACK_OFF = 16  # a failed probe doubles the wait for the next, up to this many times
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
        self._last_probe: float | None = None  # when the last probe began (or the first step)
        self._back_off = 1  # the wait between probes, in PROBE_EVERY / PROBE_AFTER_S
        self._usual: dict[bool, float | None] = {False: None, True: None}  # narrow -> seconds
        self._usual_at_probe: float | None = None  # the current mode's, when it was probed

    def choose(self, *, timed: bool, urgent: bool = False, now: float | None = None) -> int:
        """Threads for a step that may use them all; ``timed``: it is one of the steps timed
        (``timed()`` follows); ``urgent``: among an answer's first words, probed only when
        the usual step is slower than ``SLOW_STEP_S`` (then a probe costs less than it
        gains)."""
        if self.threads <= 1:
            return self.threads
        now = time.monotonic() if now is None else now
        if self._last_probe is None:
            self._last_probe = now
        usual = self._usual[self.narrow]
        if usual is not None and self._usual_at_probe is not None \
                and usual > 1.5 * self._usual_at_probe:
            self._back_off = 1  # the current mode slowed down since: look again soon
        may_probe = timed and usual is not None and (not urgent or usual > SLOW_STEP_S)
        if may_probe and not self._probe_left and (
                self._since_probe >= self._probe_every * self._back_off
                or now - self._last_probe >= PROBE_AFTER_S * self._back_off):
            self._probe_left, self._probe_best = PROBE_STEPS, float("inf")
            self._usual_at_probe = usual
        self._probing = may_probe and self._probe_left > 0
        if self._probing:
            self._last_probe = now
        return 1 if self.narrow != self._probing else self.threads

    def timed(self, threads: int, seconds: float) -> None:
        """A timed step took ``seconds`` on ``threads``."""
        if self.threads <= 1:
            return
        narrow = threads < self.threads
        if not self._probing:
            self._since_probe += 1
            old = self._usual[narrow]
            self._usual[narrow] = seconds if old is None else old + (seconds - old) * _WEIGHT
            return
        self._probing = False
        self._probe_best = min(self._probe_best, seconds)
        self._probe_left -= 1
        usual = self._usual[self.narrow]
        hopeless = usual is not None and seconds > usual * GIVE_UP_ABOVE
        if self._probe_left and not hopeless:
            return
        self._probe_left, self._since_probe = 0, 0
        best = self._probe_best
        self._usual[narrow] = best
        if usual is None or best >= usual * SWITCH_BELOW:
            self._back_off = min(2 * self._back_off, MAX_BACK_OFF)
            return
        log.info("llm: %s (a step %.0f ms, against %.0f ms on %s)",
                 "one thread is faster now: another program is using the CPU"
                 if narrow else f"{self.threads} threads are faster again",
                 best * 1000, usual * 1000, f"{self.threads} threads" if narrow else "one")
        self.narrow, self._back_off = narrow, 1
