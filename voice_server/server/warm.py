"""Playbooks' stage prompts computed ahead, while no call is live (``Settings.warm_playbooks``).

Each stage's requests start with its instructions and tools, the same for every call; the
embedded model keeps their caches in memory once computed (``llm/kv_slots.SavedPrompts``), so
a call's first turn in a stage does not compute them (~2.5 s for a 300-token prompt of the 1.5B
model on 2 cores). The work runs only while no call is live: a step of it under way is not
interrupted, and beside a call's speech-to-text such steps took seconds (local_engine.py). A
call that starts meanwhile stops the request in progress; it is asked again once no call has
been live for ``FREE_S`` (a page reloaded, a client's next session: calls often follow each
other). A remote endpoint is never called ahead (``LLMRouter.warm``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..llm import LLMError, LLMRouter
from ..llm.types import ChatRequest
from ..playbook import PlaybookResponder

__all__ = ["PromptWarmer"]

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often the work checks for a call
FREE_S = 2.0  # no call for this long before the work goes on (calls often follow each other)


class PromptWarmer:
    """Computes the ``warm_requests`` of each playbook responder ``add``-ed, one playbook after
    the other in the order given, while ``calls_live()`` is False. ``aclose`` stops it.
    ``progress()`` says how far it is (``/health``): until it is done, a call's first turn in
    a stage not yet computed computes that stage's prompt (~10 s for 600 tokens of the 1.5B
    model on 2 slow cores)."""

    def __init__(self, router: LLMRouter, calls_live: Callable[[], bool]) -> None:
        self._router = router
        self._calls_live = calls_live
        self._tasks: set[asyncio.Task[None]] = set()
        self._turn = asyncio.Lock()
        self._live_at = -FREE_S  # when a call was last seen live (loop time)
        self._counts: dict[str, list[int]] = {}  # playbook id -> [computed, to compute]

    def add(self, responder: PlaybookResponder) -> None:
        """Compute its prompts (again: a new version of the playbook, or a model worker that
        died with the prompts it kept)."""
        requests = responder.warm_requests()
        counts = self._counts[responder.playbook.id] = [0, len(requests)]
        task = asyncio.get_running_loop().create_task(
            self._playbook(responder, requests, counts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    def progress(self) -> dict[str, int]:
        """Prompts computed ahead, of those to compute (a remote endpoint computes none)."""
        return {"computed": sum(c[0] for c in self._counts.values()),
                "of": sum(c[1] for c in self._counts.values())}

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _playbook(self, responder: PlaybookResponder, requests: list[ChatRequest],
                        counts: list[int]) -> None:
        async with self._turn:
            started = time.monotonic()
            for request in requests:
                try:
                    if await self._one(request):
                        counts[0] += 1
                    else:  # the model does not compute ahead (a remote endpoint)
                        counts[1] -= 1
                except LLMError as exc:
                    log.info("playbook %r: computing its prompts ahead stopped: %s",
                             responder.playbook.id, exc)
                    return
            if counts[0]:
                log.info("playbook %r: %d prompts computed ahead in %.1f s",
                         responder.playbook.id, counts[0], time.monotonic() - started)

    async def _one(self, request: ChatRequest) -> bool:
        """Whether the model computed ``request``'s prompt (False: it does not compute ahead)."""
        while True:
            await self._free()
            task = asyncio.ensure_future(self._router.warm(request))
            try:
                while not task.done() and not self._calls_live():
                    await asyncio.wait({task}, timeout=POLL_S)
                if task.done():
                    return task.result()
                self._live_at = asyncio.get_running_loop().time()
            finally:  # a call started (it has the model now), or the server stops
                if not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)

    async def _free(self) -> None:
        """Return once no call has been live for ``FREE_S`` (polled: calls come and go through
        many paths: WebSocket, WebRTC, phone)."""
        loop = asyncio.get_running_loop()
        while True:
            if self._calls_live():
                self._live_at = loop.time()
            elif loop.time() - self._live_at >= FREE_S:
                return
            await asyncio.sleep(POLL_S)
