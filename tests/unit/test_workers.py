"""Supervised worker processes (voice_server/workers/): calls and streams cross the process
boundary, a crash fails only the requests in flight, and the worker is started again."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from tests.conftest import scaled
from voice_server.workers import (
    RestartPolicy,
    ServiceSpec,
    SupervisedWorker,
    WorkerCallFailed,
    WorkerCrashed,
    WorkerStartFailed,
    WorkerState,
    WorkerUnavailable,
)

ECHO = "tests.support.worker_services:EchoService"


def _worker(restarts: list[str] | None = None, **kwargs) -> SupervisedWorker:
    return SupervisedWorker("test", ServiceSpec(ECHO, kwargs), threads=2,
                            on_restart=None if restarts is None else restarts.append)


async def _until(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(scaled(timeout_s)):
        while not predicate():  # noqa: ASYNC110 - polls state no event announces
            await asyncio.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_calls_run_in_another_process_and_service_errors_keep_their_kind() -> None:
    """A call returns its value from the worker; a service's exception comes back as
    WorkerCallFailed carrying the exception's class name and message."""
    async with _worker() as worker:
        assert worker.info["pid"] == worker.pid != os.getpid()
        assert await worker.call("echo", {"a": [1, 2]}) == {"a": [1, 2]}
        with pytest.raises(WorkerCallFailed) as err:
            await worker.call("fail", "bad input")
        assert (err.value.kind, str(err.value)) == ("ValueError", "bad input")
        assert await worker.call("echo", 3) == 3  # the worker lives on


async def test_a_segfault_fails_the_calls_in_flight_and_the_worker_comes_back() -> None:
    """A real SIGSEGV in native code: the call in flight and a concurrent one fail with
    WorkerCrashed naming the signal; the worker is started again and answers."""
    restarts: list[str] = []
    async with _worker(restarts) as worker:
        first_pid = worker.pid
        slow = asyncio.create_task(worker.call("sleep", 30))
        await _until(lambda: worker.in_flight == 1)
        with pytest.raises(WorkerCrashed, match="SIGSEGV"):
            await worker.call("segfault")
        with pytest.raises(WorkerCrashed):
            await slow
        assert restarts == ["test"]
        assert worker.health()["status"] == "restarting"
        assert worker.health()["last_exit"] == "killed by SIGSEGV"
        started = time.monotonic()
        assert await worker.call("echo", "back") == "back"  # waits for the restart
        assert time.monotonic() - started < scaled(10)
        assert worker.pid != first_pid and not _alive(first_pid)
        assert worker.health() == {"status": "ok", "pid": worker.pid, "restarts": 1,
                                   "last_exit": "killed by SIGSEGV"}


async def test_a_native_abort_is_logged_with_what_the_process_said(caplog, capfd) -> None:
    """The worker's stderr reaches ours line by line, and the log line of its death quotes
    what it said last (an assertion's message), not only the signal; ggml's gdb backtrace
    is off in the worker."""
    async with _worker() as worker:
        assert await worker.call("environment", "GGML_NO_BACKTRACE") == "1"
        with pytest.raises(WorkerCrashed, match="SIGABRT"):
            await worker.call("abort_saying", "GGML_ASSERT(n_tokens > 0) failed")
        await _until(lambda: "worker died" in caplog.text)
        assert "test worker died (killed by SIGABRT), saying: GGML_ASSERT(n_tokens > 0) " \
               "failed;" in caplog.text
        assert "GGML_ASSERT(n_tokens > 0) failed\n" in capfd.readouterr().err


async def test_a_worker_keeps_onnxruntime_offline_whatever_the_server_was_given(
        monkeypatch) -> None:
    """onnxruntime's telemetry stays off in every worker (``OFFLINE_ENVIRONMENT``), also when
    the server's own environment says otherwise (tests/integration/test_offline.py shows what
    the variable stops)."""
    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    async with _worker() as worker:
        assert await worker.call("environment", "ORT_DISABLE_TELEMETRY") == "1"


async def test_sigkill_ends_a_stream_with_the_crash() -> None:
    """Stream items arrive in order; SIGKILL of the worker mid-stream raises WorkerCrashed
    from the stream's next read."""
    async with _worker([]) as worker:
        stream = await worker.open_stream("count", 1000, 0.01)
        assert [await stream.get() for _ in range(3)] == [0, 1, 2]
        os.kill(worker.pid, signal.SIGKILL)
        with pytest.raises(WorkerCrashed, match="SIGKILL"):
            while True:
                await stream.get()
        assert worker.in_flight == 0


async def test_a_stream_runs_to_its_end_and_a_tell_stops_another() -> None:
    async with _worker() as worker:
        whole = await worker.open_stream("count", 3, 0.0)
        assert [await whole.get() for _ in range(4)] == [0, 1, 2, "done"]
        whole.close()
        stopped = await worker.open_stream("count", 1000, 0.05)
        assert await stopped.get() == 0
        worker.tell("stop", stopped.rid)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(stopped.get(), 0.5)
        stopped.close()
        assert worker.in_flight == 0


async def test_a_service_that_cannot_start_says_why() -> None:
    worker = _worker(fail_at_start="no model file at /nowhere")
    with pytest.raises(WorkerStartFailed, match="RuntimeError: no model file at /nowhere"):
        await worker.start()
    assert worker.state is WorkerState.STOPPED and worker.pid is not None
    assert not _alive(worker.pid)  # no process left behind
    await worker.aclose()


async def test_close_ends_the_process_and_is_idempotent() -> None:
    worker = _worker()
    await worker.start()
    pid = worker.pid
    pending = asyncio.create_task(worker.call("sleep", 30))
    await _until(lambda: worker.in_flight == 1)
    await worker.aclose()
    await worker.aclose()
    with pytest.raises(WorkerUnavailable):
        await pending
    assert not _alive(pid)
    with pytest.raises(WorkerUnavailable):
        await worker.call("echo", 1)


async def test_restarts_back_off_and_a_call_waits_only_so_long() -> None:
    """Restarts of a worker that keeps dying wait longer each time (0.1, 0.2, 0.4 s ... up to
    a cap); a call that finds the worker down waits at most ``wait_ready_s``."""
    policy = RestartPolicy(first_delay_s=0.1, max_delay_s=1.0)
    assert [policy.delay(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    worker = SupervisedWorker("test", ServiceSpec(ECHO), policy=RestartPolicy(first_delay_s=5),
                              wait_ready_s=0.3)
    async with worker:
        os.kill(worker.pid, signal.SIGKILL)
        await _until(lambda: worker.state is WorkerState.RESTARTING)
        started = time.monotonic()
        with pytest.raises(WorkerUnavailable, match="restarting"):
            await worker.call("echo", 1)
        assert 0.25 < time.monotonic() - started < scaled(2)


async def test_a_spec_that_cannot_start_gives_way_to_its_fallback() -> None:
    """The embedded model's AVX-512 kernels behind the portable ones: a spec whose service
    fails to start is replaced by the fallback at once, which serves from then on."""
    worker = SupervisedWorker(
        "test", ServiceSpec(ECHO, {"fail_at_start": "libggml-cpu.so.0: invalid ELF header"},
                            label="icelake"),
        fallback=ServiceSpec(ECHO, label="portable"))
    async with worker:
        assert worker.spec.label == "portable" and worker.fallback is None
        assert await worker.call("echo", 1) == 1


async def test_an_illegal_instruction_moves_to_the_fallback_and_a_segfault_does_not() -> None:
    """A worker that dies of SIGILL (code for features this CPU lacks) restarts on its
    fallback spec; a segfault restarts the same spec. ``env`` reaches the worker's process."""
    mark = "VOICE_SERVER_TEST_BUILD"
    worker = SupervisedWorker("test", ServiceSpec(ECHO, env={mark: "icelake"}, label="icelake"),
                              fallback=ServiceSpec(ECHO, label="portable"))
    async with worker:
        assert await worker.call("environment", mark) == "icelake"
        with pytest.raises(WorkerCrashed, match="SIGSEGV"):
            await worker.call("segfault")
        assert await worker.call("environment", mark) == "icelake"
        with pytest.raises(WorkerCrashed, match="SIGILL"):
            await worker.call("illegal_instruction")
        assert await worker.call("environment", mark) is None
        assert worker.spec.label == "portable"
        assert worker.health()["last_exit"] == "killed by SIGILL"


def test_ggml_still_reads_the_variable_that_turns_its_gdb_backtrace_off() -> None:
    """The workers set ``GGML_NO_BACKTRACE`` (workers/last_words.py); ggml reads it in its
    crash handler. When an upgrade renames it, this fails."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        pytest.skip("llama-cpp-python is not installed")
    base = Path(spec.origin).parent / "lib" / "libggml-base.so"
    assert b"GGML_NO_BACKTRACE" in base.read_bytes()
