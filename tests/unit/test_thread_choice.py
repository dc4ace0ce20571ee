"""All the embedded model's threads or one (voice_server/llm/thread_choice.py): the rule on
step times, and the real engine beside a program that keeps one of its cores busy."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from voice_server.llm.thread_choice import PROBE_EVERY, PROBE_STEPS, ThreadChoice

QUIET = {2: 0.039, 1: 0.058}  # a 1.5B token, s, alone on 2 cores (module docstring)
CROWDED = {2: 0.156, 1: 0.091}  # ... beside a program that keeps one core busy


def run(choice: ThreadChoice, times: dict[int, float], steps: int, *,
        urgent: bool = False) -> list[int]:
    used = []
    for _ in range(steps):
        threads = choice.choose(may_probe=not urgent)
        choice.timed(threads, times[threads])
        used.append(threads)
    return used


def test_a_quiet_machine_keeps_both_threads_and_probes_one_step_in_a_while() -> None:
    choice = ThreadChoice(2)
    used = run(choice, QUIET, 3 * (PROBE_EVERY + PROBE_STEPS))
    assert not choice.narrow
    assert used.count(1) == 3 * PROBE_STEPS  # a probe after each PROBE_EVERY steps
    assert used[PROBE_EVERY - 1:PROBE_EVERY + PROBE_STEPS + 1] == [2, *[1] * PROBE_STEPS, 2]


def test_a_busy_core_moves_to_one_thread_and_back_when_it_is_free() -> None:
    choice = ThreadChoice(2)
    run(choice, QUIET, 10)
    used = run(choice, CROWDED, PROBE_EVERY + 10)
    assert choice.narrow and used[-5:] == [1] * 5
    assert run(choice, CROWDED, 3 * PROBE_EVERY).count(2) <= 3 * PROBE_STEPS  # probes only
    run(choice, QUIET, 2 * (PROBE_EVERY + PROBE_STEPS))
    assert not choice.narrow


def test_one_slow_step_of_a_probe_does_not_decide_it() -> None:
    """The fastest step of a probe is what counts: a scheduler hiccup in one is not a mode."""
    choice = ThreadChoice(2)
    run(choice, QUIET, PROBE_EVERY - 1)
    for seconds in (QUIET[2], QUIET[2] * 3, QUIET[2] * 3, QUIET[2] * 3):
        choice.timed(choice.choose(may_probe=True), seconds)  # a steady step, then a probe...
    assert not choice.narrow  # ... whose steps were all held up: never faster than two
    choice = ThreadChoice(2)
    run(choice, CROWDED, PROBE_EVERY)
    for seconds in (CROWDED[1] * 3, CROWDED[1], CROWDED[1] * 3):
        choice.timed(choice.choose(may_probe=True), seconds)
    assert choice.narrow  # one clean step of the probe shows one thread is faster


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
@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None or _small_model() is None,
                    reason="the 'small' profile's model and llama-cpp-python are needed")
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="two CPUs to pin to are needed")
def test_the_engine_leaves_a_core_another_program_keeps_busy() -> None:
    """The engine and the bundled 0.5B model on two CPUs, a busy loop on one of them: the
    engine moves to one thread while the loop runs and back to two once it ends. (Not the
    tiny model: at ~10 ms a token two threads gain it too little to tell every time, and
    beside other tests' idle llama.cpp threads one was faster for it even without the loop.)"""
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
        for attempt in range(3):  # an answer holds ~3 probes; the story may end sooner
            Reader(engine, _ask(LONG + " " * attempt), max_tokens=4 * PROBE_EVERY).wait()
            if engine.thread_choice.narrow:
                break
        assert engine.thread_choice.narrow
        hog.kill()
        hog.wait()
        for attempt in range(3):
            Reader(engine, _ask(LONG + "\n" * attempt), max_tokens=4 * PROBE_EVERY).wait()
            if not engine.thread_choice.narrow:
                break
        assert not engine.thread_choice.narrow
    finally:
        hog.kill()
        engine.close()
        model.close()
        os.sched_setaffinity(0, before)
