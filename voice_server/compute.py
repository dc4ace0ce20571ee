"""A bounded thread pool for CPU-bound model work (STT, TTS) with admission control.

Work is admitted only when a worker is free, so cancelled requests never pile up in the
executor's queue, and a slot is released only when its thread really finishes. Waiting work
marked ``urgent`` (someone is waiting in silence: the transcript of a finished question, the
first piece of an answer) is admitted before the rest (later sentences of answers already
playing, interim transcripts): first piece first, as the embedded LLM schedules its tokens.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ComputePool"]

T = TypeVar("T")


class ComputePool:
    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="voice-compute")
        self._free = max_workers
        # waiters for a slot: urgent first, then the rest, each in arrival order
        self._waiting: tuple[collections.deque[asyncio.Future[None]], ...] = (
            collections.deque(), collections.deque())

    @property
    def busy(self) -> bool:
        """Every worker is taken or work is waiting."""
        return not self._free or any(self._waiting)

    async def run(self, fn: Callable[..., T], *args: Any, urgent: bool = False) -> T:
        """Run ``fn(*args)`` in a worker thread once a slot is free."""
        await self._acquire(urgent)
        loop = asyncio.get_running_loop()
        try:
            future = self.executor.submit(fn, *args)
        except BaseException:
            self._give_back()
            raise
        future.add_done_callback(lambda _: self._release(loop))
        return await asyncio.wrap_future(future)

    async def _acquire(self, urgent: bool) -> None:
        if self._free and not any(self._waiting):
            self._free -= 1
            return
        queue = self._waiting[0 if urgent else 1]
        waiter = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_back()  # the slot was handed over as we were cancelled
            else:
                queue.remove(waiter)
            raise

    def _give_back(self) -> None:
        """A slot is free: hand it to the first waiter, urgent ones first."""
        for queue in self._waiting:
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._free += 1

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give the slot back from the worker thread; a loop already closed (the process is
        shutting down while a model call finishes) has no one left to give it to."""
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                loop.call_soon_threadsafe(self._give_back)

    async def __aenter__(self) -> ComputePool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
