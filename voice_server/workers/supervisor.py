"""Supervised worker processes: the server's side of child.py.

``SupervisedWorker`` starts one worker process for a stage (``llm``, ``stt``, ``tts``), waits
until its service has loaded the model and passed its self-test, and multiplexes calls and
streams over one pipe. When the process dies (a segfault or an illegal instruction in native
code, the OOM killer, a stray ``kill -9``), every request in flight fails at once with
``WorkerCrashed`` (the caller turns it into its stage's error code: one turn is lost, never
the server), and the process is started again with exponential backoff. Requests that arrive
while it restarts wait for it, up to ``wait_ready_s``. A worker may have a fallback spec (the
embedded model's baseline llama.cpp build behind an AVX-512 one): it is served from the first
time the spec fails to start or its process dies of an illegal instruction.

The model is loaded once per worker, so every session shares it, as before. The event loop
reads each worker's pipe (a socket pair) itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from .child import ServiceSpec
from .last_words import LastWords

log = logging.getLogger(__name__)

# What native model libraries read, when imported, to stay offline; forced in every worker.
# onnxruntime (the Piper voice, Smart Turn) sends Microsoft "1DS" telemetry on Linux too: at
# import it writes a device id and an event queue under ~/.cache/Microsoft/DeveloperTools, and
# within ~30 s it resolves and posts to mobile.events.data.microsoft.com. Only this variable,
# set to "1" before the import, stops all of it; ``onnxruntime.disable_telemetry_events()``
# after the import stops neither the files nor the lookup (measured with 1.32.0; checked on
# the installed one by tests/integration/test_offline.py).
OFFLINE_ENVIRONMENT = {"ORT_DISABLE_TELEMETRY": "1"}


class WorkerError(Exception):
    """Root of the worker errors."""


class WorkerStartFailed(WorkerError):
    """The worker could not load its model or failed its self-test."""


class WorkerCrashed(WorkerError):
    """The worker process died while the request was in flight."""


class WorkerUnavailable(WorkerError):
    """The worker is closed, or did not come back within the wait."""


class WorkerCallFailed(WorkerError):
    """The service raised: ``kind`` is its exception's class name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class WorkerState(enum.Enum):
    STOPPED = "stopped"  # not started yet (the first request starts it), or its start failed
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"  # it died; a new one is on its way
    CLOSED = "closed"


@dataclass(frozen=True)
class RestartPolicy:
    """Delay before restart number ``n`` (0-based) of a worker that keeps failing:
    ``first_delay_s * 2**n`` up to ``max_delay_s``; a worker that stayed up ``stable_after_s``
    starts from the first delay again."""

    first_delay_s: float = 0.1
    max_delay_s: float = 30.0
    stable_after_s: float = 60.0

    def delay(self, failures: int) -> float:
        return min(self.max_delay_s, self.first_delay_s * 2 ** min(failures, 30))


def describe_exit(code: int | None) -> str:
    if code is None:
        return "died"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


class WorkerStream:
    """Items of one stream, in order; ``get`` raises the worker's error or its crash."""

    def __init__(self, worker: SupervisedWorker, rid: int) -> None:
        self.rid = rid
        self._worker = worker
        self._queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, item: Any) -> None:
        self._queue.put_nowait(item)

    async def get(self) -> Any:
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self.close()
            raise item
        return item

    def close(self) -> None:
        self._worker.forget(self.rid)


class SupervisedWorker:
    """One worker process serving ``spec`` for ``stage``; ``async with`` starts and stops it."""

    def __init__(self, stage: str, spec: ServiceSpec, *, threads: int = 1,
                 start_timeout_s: float = 300.0, wait_ready_s: float = 30.0,
                 policy: RestartPolicy | None = None,
                 on_restart: Callable[[str], None] | None = None,
                 fallback: ServiceSpec | None = None) -> None:
        self.stage = stage
        self.spec = spec
        # served instead of ``spec`` from the first time ``spec`` fails to start or dies of an
        # illegal instruction (a build for CPU features this machine lacks after all)
        self.fallback = fallback
        self.threads = threads
        self.start_timeout_s = start_timeout_s
        self.wait_ready_s = wait_ready_s
        self.policy = policy or RestartPolicy()
        self.on_restart = on_restart
        self.state = WorkerState.STOPPED
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self.last_exit: str | None = None
        self._proc: Any = None
        self._conn: Connection | None = None
        self._words: LastWords | None = None  # the process's stderr, relayed
        self._gen = 0
        self._first: asyncio.Future[tuple[str, Any]] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._streams: dict[int, WorkerStream] = {}
        self._ids = itertools.count(1)
        self._ready = asyncio.Event()
        self._restarter: asyncio.Task[None] | None = None
        self._failures = 0
        self._up_since = 0.0
        self._lock = asyncio.Lock()

    # ---- lifecycle ------------------------------------------------------------------------
    async def __aenter__(self) -> SupervisedWorker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def in_flight(self) -> int:
        """Calls and streams waiting for the worker."""
        return len(self._pending) + len(self._streams)

    async def start(self) -> None:
        """Start the worker (if it is not running) and wait until its service is ready."""
        async with self._lock:
            if self.state == WorkerState.STOPPED:
                try:
                    await self._launch()
                except WorkerStartFailed:
                    self.state = WorkerState.STOPPED
                    raise

    async def _launch(self) -> None:
        try:
            await self._launch_spec()
        except WorkerStartFailed as exc:
            if not self._fall_back(str(exc)):
                raise
            await self._launch_spec()

    def _fall_back(self, why: str) -> bool:
        """Serve the fallback spec from now on, if there is one."""
        if self.fallback is None:
            return False
        log.warning("%s (%s); starting the %s worker with %s instead", why,
                    self.spec.label or self.spec.factory, self.stage,
                    self.fallback.label or self.fallback.factory)
        self.spec, self.fallback = self.fallback, None
        return True

    async def _launch_spec(self) -> None:
        self.state = WorkerState.STARTING
        loop = asyncio.get_running_loop()
        # on the loop's thread: the worker's parent-death signal fires when the thread that
        # started it ends, and an executor thread may end long before the server does
        proc, conn, words = _spawn(self.stage, self.spec, self.threads)
        self._gen += 1
        self._proc, self._conn, self._words = proc, conn, words
        self._first = loop.create_future()
        loop.add_reader(conn.fileno(), self._readable, conn, self._gen)
        started = time.monotonic()
        try:
            kind, payload = await asyncio.wait_for(self._first, self.start_timeout_s)
        except TimeoutError:
            await self._stop_process(timeout_s=0)
            raise WorkerStartFailed(f"the {self.stage} worker was not ready within "
                                    f"{self.start_timeout_s:.0f} s") from None
        if kind != "ready":
            await self._stop_process(timeout_s=1)
            raise WorkerStartFailed(f"the {self.stage} worker failed to start: {payload}")
        self.info = payload
        self.state = WorkerState.READY
        self._up_since = time.monotonic()
        self._ready.set()
        log.info("%s worker ready (pid %d) in %.2f s", self.stage, proc.pid,
                 self._up_since - started)

    async def aclose(self) -> None:
        """Stop the worker; requests still in flight fail with ``WorkerUnavailable``."""
        self.state = WorkerState.CLOSED
        if self._restarter is not None:
            self._restarter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restarter
        self._fail_all(WorkerUnavailable(f"the {self.stage} worker is closed"))
        if self._conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(("exit",))
        await self._stop_process(timeout_s=5)

    async def _stop_process(self, *, timeout_s: float) -> None:
        proc, conn = self._proc, self._conn
        if proc is None:
            return
        self._gen += 1  # whatever the old process still says is not for us
        if conn is not None:
            _unwatch(conn)  # no wake-ups for an ended pipe while we wait
        if timeout_s:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, timeout_s)
        if proc.poll() is None:
            proc.kill()
            await asyncio.to_thread(proc.wait)
        if conn is not None:
            conn.close()
        self._conn = None

    # ---- the pipe -----------------------------------------------------------------------------
    def _readable(self, conn: Connection, gen: int) -> None:
        """Read what the worker sent, on the loop (no thread hop per message: a token of an
        answer reaches its reader sooner); the end of the pipe means the process died."""
        if gen != self._gen:  # an old process's pipe
            _unwatch(conn)
            return
        try:
            while gen == self._gen and conn.poll():
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    raise
                except Exception:  # an answer that does not unpickle: the request fails alone
                    log.exception("%s worker sent an unreadable message", self.stage)
                    continue
                self._on_message(gen, message)
        except (EOFError, OSError):
            _unwatch(conn)
            self._on_exit(gen)

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._conn is None:
            raise WorkerCrashed(f"the {self.stage} worker is not running")
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:
            raise WorkerCrashed(f"the {self.stage} worker is gone") from exc

    def _on_message(self, gen: int, message: tuple[Any, ...]) -> None:
        if gen != self._gen:
            return
        kind = message[0]
        if kind in ("ready", "failed"):
            if self._first is not None and not self._first.done():
                self._first.set_result((kind, message[1]))
            return
        rid = message[1]
        if kind == "item":
            if (stream := self._streams.get(rid)) is not None:
                stream.put(message[2])
            return
        outcome = WorkerCallFailed(message[2], message[3]) if kind == "error" else None
        if (stream := self._streams.get(rid)) is not None and outcome is not None:
            stream.put(outcome)
        elif (future := self._pending.get(rid)) is not None and not future.done():
            if outcome is None:
                future.set_result(message[2])
            else:
                future.set_exception(outcome)

    def _on_exit(self, gen: int) -> None:
        if gen != self._gen:
            return
        self._gen += 1
        asyncio.get_running_loop().create_task(
            self._died(self._proc, self._first, self._words), name=f"{self.stage}-worker-died")

    async def _died(self, proc: subprocess.Popen[bytes],
                    first: asyncio.Future[tuple[str, Any]] | None,
                    words: LastWords | None) -> None:
        """The pipe ended: the process is gone or going. Its exit status names the cause, and
        its last words on stderr the reason. ``first``: that process's start, which the next
        one's must not be taken for."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.wait, 2)
        how = describe_exit(proc.poll())
        if first is not None and not first.done():  # died while starting
            said = await _said(words)
            if not first.done():  # (the start may have timed out meanwhile)
                first.set_result(("failed", f"the process {how}" + (f": {said}" if said else "")))
            return
        if self.state != WorkerState.READY or proc is not self._proc:
            return
        self.state = WorkerState.RESTARTING
        self._ready.clear()
        self.restarts += 1
        self.last_exit = how
        in_flight = self.in_flight
        self._fail_all(WorkerCrashed(f"the {self.stage} worker died ({how})"))
        if self.on_restart is not None:
            self.on_restart(self.stage)
        # the requests have failed already; the restart waits for these words (up to 1 s; the
        # pipe has mostly ended by now)
        said = await _said(words)
        log.error("the %s worker died (%s)%s; %d request(s) in flight failed; restarting",
                  self.stage, how, f", saying: {said}" if said else "", in_flight)
        if self.state == WorkerState.CLOSED:
            return
        if proc.poll() == -signal.SIGILL:
            self._fall_back(f"the {self.stage} worker {how}")
        self._restarter = asyncio.get_running_loop().create_task(
            self._restart(died=time.monotonic()), name=f"restart-{self.stage}-worker")

    def _fail_all(self, exc: WorkerError) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(exc)
        for stream in list(self._streams.values()):
            stream.put(exc)

    async def _restart(self, *, died: float) -> None:
        await self._stop_process(timeout_s=5)
        while self.state != WorkerState.CLOSED:
            if died - self._up_since > self.policy.stable_after_s:
                self._failures = 0
            await asyncio.sleep(self.policy.delay(self._failures))
            self._failures += 1
            try:
                await self._launch()
            except WorkerStartFailed as exc:
                self.state = WorkerState.RESTARTING
                self.last_exit = str(exc)
                log.error("%s; trying again", exc)
                continue
            log.warning("the %s worker is back %.2f s after it died", self.stage,
                        time.monotonic() - died)
            return

    # ---- requests -----------------------------------------------------------------------------
    async def _until_ready(self) -> None:
        if self.state == WorkerState.READY:
            return
        if self.state == WorkerState.STOPPED:  # not started yet: the first request starts it
            await self.start()
            return
        if self.state == WorkerState.CLOSED:
            raise WorkerUnavailable(f"the {self.stage} worker is closed")
        try:
            await asyncio.wait_for(self._ready.wait(), self.wait_ready_s)
        except TimeoutError:
            raise WorkerUnavailable(f"the {self.stage} worker is restarting; it was not back "
                                    f"within {self.wait_ready_s:.0f} s") from None

    async def call(self, method: str, *args: Any) -> Any:
        """``service.method(*args)`` in the worker; raises ``WorkerCallFailed`` with the
        service's error, ``WorkerCrashed`` if the worker dies meanwhile."""
        await self._until_ready()
        rid = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            self._send(("call", rid, method, args))
            return await future
        finally:
            self._pending.pop(rid, None)

    async def open_stream(self, method: str, *args: Any) -> WorkerStream:
        """Start ``service.method(emit, rid, *args)``; close the stream when done with it."""
        await self._until_ready()
        stream = WorkerStream(self, next(self._ids))
        self._streams[stream.rid] = stream
        try:
            self._send(("stream", stream.rid, method, args))
        except BaseException:
            stream.close()
            raise
        return stream

    def forget(self, rid: int) -> None:
        """Stream ``rid`` is closed: later items for it are dropped."""
        self._streams.pop(rid, None)

    def tell(self, method: str, *args: Any) -> None:
        """``service.method(*args)`` without an answer; lost if the worker is not running."""
        if self.state == WorkerState.READY:
            with contextlib.suppress(WorkerCrashed):
                self._send(("tell", method, args))

    def health(self) -> dict[str, Any]:
        status = "ok" if self.state is WorkerState.READY else self.state.value
        return {"status": status, "pid": self.pid,
                "restarts": self.restarts, "last_exit": self.last_exit}


def _spawn(stage: str, spec: ServiceSpec, threads: int) -> tuple[subprocess.Popen[bytes],
                                                                  Connection, LastWords]:
    """Start ``python -m voice_server.workers`` with one end of a socket pair, and send
    it what to serve. A fresh interpreter, not a fork of a threaded server, and not
    ``multiprocessing``'s spawn, which runs the server's main module again in the child.
    Its stderr is relayed to ours (``LastWords``), without ggml's gdb backtrace on a crash
    (``GGML_NO_BACKTRACE``: last_words.py), and with ``OFFLINE_ENVIRONMENT`` over whatever
    the server was given."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        # the child inherits the whole environment (not a read of settings: config.py owns
        # those), with our import path so it finds this package however we were started
        env = {"GGML_NO_BACKTRACE": "1", **os.environ, **spec.env, **OFFLINE_ENVIRONMENT,
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "voice_server.workers", stage, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        conn = Connection(os.dup(ours.fileno()))
    words = LastWords(proc.stderr)  # type: ignore[arg-type]
    try:
        conn.send((spec, threads, logging.getLogger().getEffectiveLevel()))
    except OSError:
        pass  # it died at once: the loop sees the end of the pipe
    return proc, conn, words


async def _said(words: LastWords | None) -> str:
    return await asyncio.to_thread(words.said) if words is not None else ""


def _unwatch(conn: Connection) -> None:
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        asyncio.get_running_loop().remove_reader(conn.fileno())
