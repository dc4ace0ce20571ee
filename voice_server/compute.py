"""A bounded thread pool for CPU-bound model work (STT, TTS) with admission control.

Work is admitted only when a worker is free, so cancelled requests never pile up in the
executor's queue, and a slot is released only when its thread really finishes.
"""

from __future__ import annotations

import asyncio
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
        self._slots = asyncio.Semaphore(max_workers)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` in a worker thread once a slot is free."""
        await self._slots.acquire()
        loop = asyncio.get_running_loop()
        try:
            future = self.executor.submit(fn, *args)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._release(loop))
        return await asyncio.wrap_future(future)

    def _release(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give the slot back from the worker thread; a loop already closed (the process is
        shutting down while a model call finishes) has no one left to give it to."""
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed between the check and the call
                loop.call_soon_threadsafe(self._slots.release)

    async def __aenter__(self) -> ComputePool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
