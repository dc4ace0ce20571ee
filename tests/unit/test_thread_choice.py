"""All the embedded model's threads or one (voice_server/llm/thread_choice.py): the rule on
step times, and the real engine beside a program that keeps one of its cores busy."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from voice_server.llm.thread_choice import PROBE_EVERY, PROBE_STEPS, ThreadChoice

QUIET = {2: 0.039, 1: 0.058}  # a 1.5B token, s, alone on 2 cores (module docstring)
CROWDED = {2: 0.156, 1: 0.091}  # ... beside a program that keeps one core busy


class Clock:
    now = 0.0


def step(choice: ThreadChoice, seconds_on: Callable[[int], float], *,
         urgent: bool = False) -> int:
    """One timed step whose time ``seconds_on(threads)`` gives; the clock moves on by it."""
    threads = choice.choose(timed=True, urgent=urgent, now=Clock.now)
    seconds = seconds_on(threads)
    Clock.now += seconds
    choice.timed(threads, seconds)
    return threads


def run(choice: ThreadChoice, times: dict[int, float], steps: int, *,
        urgent: bool = False) -> list[int]:
    return [step(choice, times.__getitem__, urgent=urgent) for _ in range(steps)]


def test_a_quiet_machine_keeps_both_threads_and_probes_ever_less_often() -> None:
    choice = ThreadChoice(2)
    used = run(choice, QUIET, 7 * PROBE_EVERY + 3 * PROBE_STEPS)
    assert not choice.narrow
    probes = [i for i, threads in enumerate(used) if threads == 1][::PROBE_STEPS]
    assert used.count(1) == 3 * PROBE_STEPS, used  # each probe 3 steps, the last one's best
    # after PROBE_EVERY steps, then each failed probe doubles the wait
    gaps = [b - a - PROBE_STEPS for a, b in zip([-PROBE_STEPS, *probes], probes, strict=False)]
    assert gaps == [PROBE_EVERY, 2 * PROBE_EVERY, 4 * PROBE_EVERY], probes


def test_a_busy_core_moves_to_one_thread_and_back_when_it_is_free() -> None:
    choice = ThreadChoice(2)
    run(choice, QUIET, 10)
    used = run(choice, CROWDED, PROBE_EVERY + 10)
    assert choice.narrow and used[-1] == 1
    later = run(choice, CROWDED, 3 * PROBE_EVERY)
    assert choice.narrow and later.count(2) <= len(later) // 4  # probes of two only
    run(choice, QUIET, 2 * (PROBE_EVERY + PROBE_STEPS))
    assert not choice.narrow


def test_one_slow_step_of_a_probe_does_not_decide_it() -> None:
    """The fastest step of a probe is what counts: a scheduler hiccup in one is not a mode."""
    choice = ThreadChoice(2)
    run(choice, QUIET, PROBE_EVERY - 1)
    held_up = iter((QUIET[2], QUIET[2] * 3, QUIET[2] * 3, QUIET[2] * 3))
    for _ in range(4):  # a steady step, then a probe...
        step(choice, lambda threads: next(held_up))
    assert not choice.narrow  # ... whose steps were all held up: never faster than two
    choice = ThreadChoice(2)
    run(choice, CROWDED, PROBE_EVERY)
    one_clean = iter((CROWDED[1] * 3, CROWDED[1], CROWDED[1] * 3))
    for _ in range(3):
        step(choice, lambda threads: next(one_clean))
    assert choice.narrow  # one clean step of the probe shows one thread is faster


def test_a_probe_into_the_collapse_ends_at_its_first_step() -> None:
    """One thread now; a probe of two meets ~1.5 s steps: one such step, not three."""
    choice = ThreadChoice(2)
    collapsed = {2: 1.5, 1: 0.048}
    run(choice, collapsed, 6, urgent=True)
    assert choice.narrow
    used = run(choice, collapsed, 4 * PROBE_EVERY)
    probes = used.count(2)
    assert 1 <= probes <= 3, used  # each probe one step; the waits between them grow


def test_steps_that_collapse_are_probed_at_once_first_words_too() -> None:
    """Inside the server, beside a busy loop, two threads took ~1.5 s a token and one ~48 ms:
    waiting for PROBE_EVERY steps (48 s) or for the first words to pass let answers time
    out. Such steps are probed after PROBE_AFTER_S, among the first words too."""
    collapsed = {2: 1.5, 1: 0.048}
    choice = ThreadChoice(2)
    used = run(choice, collapsed, 6, urgent=True)
    assert choice.narrow and used.index(1) <= 2, used
    assert run(choice, QUIET, 8, urgent=True) == [1] * 8  # quick steps: no probe among them


def test_the_first_words_are_never_a_probe() -> None:
    choice = ThreadChoice(2)
    assert set(run(choice, QUIET, 5 * PROBE_EVERY, urgent=True)) == {2}


def test_one_thread_is_one_thread() -> None:
    choice = ThreadChoice(1)
    assert set(run(choice, CROWDED, 3 * PROBE_EVERY)) == {1}


def _small_model() -> str | None:
    from voice_server.llm.profiles import SPLIT_MODELS

    path = SPLIT_MODELS["small"].path()
    return str(path) if path.is_file() else None


@pytest.mark.slow
@pytest.mark.serial  # a busy loop on one core: another worker's test would be a second one
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None or _small_model() is None,
                    reason="the 'small' profile's model and llama-cpp-python are needed")
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="two CPUs to pin to are needed")
def test_the_engine_leaves_a_core_another_program_keeps_busy() -> None:
    """The engine and the bundled 0.5B model on two CPUs, a busy loop on one of them: the
    engine moves to one thread while the loop runs and back to two once it ends. (Not the
    tiny model: at ~10 ms a token two threads gain it too little to tell every time, and
    beside other tests' idle llama.cpp threads one was faster for it even without the loop.)
    In a process of its own: inside the suite's process, on an Intel Xeon, the engine kept
    two threads through six answers in two runs of three, though alone there one thread
    decodes a token in ~60 ms beside the loop and two in ~95 ms."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", "from tests.unit.test_thread_choice import "
                          "leaves_a_core; leaves_a_core()"], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def leaves_a_core() -> None:
    """The test's body, run by it in a fresh interpreter."""
    from llama_cpp import Llama

    from voice_server.llm.local_engine import LlamaEngine

    from .test_local_engine import LONG, Reader, _ask

    before = os.sched_getaffinity(0)
    cpus = sorted(before)[:2]
    os.sched_setaffinity(0, cpus)  # llama.cpp's threads start here and keep it
    model = Llama(model_path=_small_model(), n_ctx=2048, n_threads=2, verbose=False)
    engine = LlamaEngine(model, slots=1, n_ctx=2048, n_threads=2)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, [cpus[0]])
        time.sleep(0.3)
        # an answer holds ~3 probes; the story may end sooner; on an Intel Xeon three answers
        # once stayed on two threads: up to six, as below
        for attempt in range(6):
            Reader(engine, _ask(LONG + " " * attempt), max_tokens=4 * PROBE_EVERY).wait()
            if engine.thread_choice.narrow:
                break
        assert engine.thread_choice.narrow, vars(engine.thread_choice)
        hog.kill()
        hog.wait()
        # each failed probe doubles the wait for the next; a clean-clone CI run once stayed on
        # one thread through three answers (why was not seen): up to six
        for attempt in range(6):
            Reader(engine, _ask(LONG + "\n" * attempt), max_tokens=4 * PROBE_EVERY).wait()
            if not engine.thread_choice.narrow:
                break
        assert not engine.thread_choice.narrow, vars(engine.thread_choice)
    finally:
        hog.kill()
        engine.close()
        model.close()
        os.sched_setaffinity(0, before)
