"""A bounded thread pool for CPU-bound model work (STT, TTS) with admission control.

Work is admitted only when a worker is free, so cancelled requests never pile up in the
executor's queue, and a slot is released only when its thread really finishes. Work marked
``urgent`` (someone is waiting in silence: the transcript of a finished question, the first
piece of an answer) is admitted before the rest (later sentences of answers already playing,
interim transcripts), and the rest never takes the last worker: a long sentence cannot make an
urgent job wait for a thread. First piece first, as the embedded LLM schedules its tokens; the
LLM also reads ``urgent_jobs`` and ``running_jobs`` to give way (llm/local_engine.py), from its
worker process, through ``SharedLoad``.

Speech to text and text to speech run in worker processes (workers/); the pool admits them
(``slot``), so the same budget holds across processes. ``run`` runs small in-process work
(decoding a WAV) on the pool's own threads.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import mmap
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["ComputePool", "SharedLoad", "usable_cpus"]


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity (taskset, cpusets) and a cgroup v2 CPU
    quota (``docker run --cpus=1`` and systemd's CPUQuota leave the affinity at every CPU of
    the host)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    try:
        own = Path("/proc/self/cgroup").read_text().strip().partition("::")[2]
    except OSError:
        own = ""
    for folder in {Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup", own.lstrip("/"))}:
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            if quota != "max":
                count = min(count, -(-int(quota) // int(period)))
        except (OSError, ValueError):
            continue
    return max(1, count)

T = TypeVar("T")

_URGENT, _LATER = 0, 1


class SharedLoad:
    """The pool's urgent and running job counts in shared memory: the pool writes them, the
    LLM worker process reads them (``llm.local_requests.OtherWork``). A 16-byte file mapped by
    both (in /dev/shm where there is one); it pickles as its path, and the pool's
    ``close`` removes it."""

    def __init__(self, path: str | None = None) -> None:
        self._owner = path is None
        if path is None:
            shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
            fd, path = tempfile.mkstemp(prefix="voice-server-load-", dir=shm)
            os.ftruncate(fd, 16)
        else:
            fd = os.open(path, os.O_RDWR)
        self.path = path
        try:
            self._map = mmap.mmap(fd, 16)
        finally:
            os.close(fd)
        self._counts = memoryview(self._map).cast("q")

    def __reduce__(self) -> tuple[Any, ...]:
        return (SharedLoad, (self.path,))

    def publish(self, urgent: int, running: int) -> None:
        self._counts[0], self._counts[1] = urgent, running

    def close(self) -> None:
        if self._owner:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    @property
    def urgent_jobs(self) -> int:
        return int(self._counts[0])

    @property
    def running_jobs(self) -> int:
        return int(self._counts[1])


class ComputePool:
    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self.shared = SharedLoad()
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="voice-compute")
        self._running = [0, 0]  # urgent, later
        # waiters for a worker, per kind, each in arrival order
        self._waiting: tuple[collections.deque[asyncio.Future[None]], ...] = (
            collections.deque(), collections.deque())

    @property
    def busy(self) -> bool:
        """Every worker is taken or work is waiting."""
        return self.running_jobs >= self.max_workers or any(self._waiting)

    @property
    def urgent_jobs(self) -> int:
        """Urgent jobs running or waiting (read from other threads too: plain int reads)."""
        return self._running[_URGENT] + len(self._waiting[_URGENT])

    @property
    def running_jobs(self) -> int:
        return sum(self._running)

    @contextlib.asynccontextmanager
    async def slot(self, *, urgent: bool = False) -> AsyncIterator[None]:
        """Hold one of the pool's workers for work done elsewhere (a worker process)."""
        kind = _URGENT if urgent else _LATER
        await self._acquire(kind)
        try:
            yield
        finally:
            self._finished(kind)

    async def run(self, fn: Callable[..., T], *args: Any, urgent: bool = False) -> T:
        """Run ``fn(*args)`` in a worker thread once a worker is free for its kind."""
        kind = _URGENT if urgent else _LATER
        await self._acquire(kind)
        loop = asyncio.get_running_loop()
        try:
            future = self.executor.submit(fn, *args)
        except BaseException:
            self._finished(kind)
            raise
        future.add_done_callback(lambda _: self._release(loop, kind))
        return await asyncio.wrap_future(future)

    def _may_start(self, kind: int) -> bool:
        if self.running_jobs >= self.max_workers:
            return False
        # later work leaves one worker for urgent work (unless there is only one)
        return kind == _URGENT or self.max_workers == 1 or (
            self._running[_LATER] < self.max_workers - 1)

    async def _acquire(self, kind: int) -> None:
        if not any(self._waiting[:kind + 1]) and self._may_start(kind):
            self._running[kind] += 1
            self._publish()
            return
        queue = self._waiting[kind]
        waiter = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        self._publish()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._finished(kind)  # the worker was handed over as we were cancelled
            else:
                with contextlib.suppress(ValueError):  # already dropped by _admit_waiting
                    queue.remove(waiter)
                self._publish()
            raise

    def _finished(self, kind: int) -> None:
        self._running[kind] -= 1
        self._admit_waiting()
        self._publish()

    def _publish(self) -> None:
        self.shared.publish(self.urgent_jobs, self.running_jobs)

    def _admit_waiting(self) -> None:
        """Hand free workers to waiters: urgent ones first."""
        for kind, queue in enumerate(self._waiting):
            while queue and self._may_start(kind):
                waiter = queue.popleft()
                if not waiter.done():
                    self._running[kind] += 1
                    waiter.set_result(None)

    def _release(self, loop: asyncio.AbstractEventLoop, kind: int) -> None:
        """Give the worker back from its thread; a loop already closed (the process is
        shutting down while a model call finishes) has no one left to give it to."""
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                loop.call_soon_threadsafe(self._finished, kind)

    async def __aenter__(self) -> ComputePool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.shared.close()
