"""A model worker whose calls the compute pool admits (speech to text, text to speech, the
end-of-turn model), and the lifecycle those stages share."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..compute import ComputePool
from ..workers import ServiceSpec, SupervisedWorker, WorkerCallFailed, WorkerError

__all__ = ["PooledModel", "PooledWorker"]

log = logging.getLogger(__name__)


class PooledWorker:
    """``stage``'s worker process; each call holds a compute-pool slot (urgent ones first, see
    compute.py), and every failure comes out as ``error`` (the stage's exception, which the
    server sends as the stage's error code)."""

    def __init__(self, stage: str, spec: ServiceSpec, pool: ComputePool, *,
                 error: type[Exception], what: str,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self._pool = pool
        self._error = error
        self._what = what
        self.worker = SupervisedWorker(stage, spec, threads=pool.max_workers,
                                       on_restart=on_restart)

    async def start(self) -> None:
        """Start the worker: it loads its model and passes its self-test before it is ready."""
        try:
            await self.worker.start()
        except WorkerError as exc:
            raise self._error(str(exc)) from exc

    async def call(self, method: str, *args: Any, urgent: bool) -> Any:
        try:
            async with self._pool.slot(urgent=urgent):
                return await self.worker.call(method, *args)
        except WorkerCallFailed as exc:
            log.error("%s failed: %s: %s", self._what, exc.kind, exc)
            raise self._error(f"{self._what} failed: {exc.kind}") from exc
        except WorkerError as exc:
            raise self._error(f"{self._what} failed: {exc}") from exc

    async def aclose(self) -> None:
        await self.worker.aclose()


class PooledModel:
    """What every pooled model stage shares: ``load`` starts its worker (which loads the model
    and passes its self-test before it is ready), ``health`` is the worker's plus ``about`` (what
    model it runs), ``aclose`` stops it."""

    def __init__(self, models: PooledWorker, about: dict[str, str]) -> None:
        self._models = models
        self._about = about
        self.worker = models.worker

    async def load(self) -> None:
        await self._models.start()

    def health(self) -> dict[str, Any]:
        return {**self.worker.health(), **self._about}

    async def aclose(self) -> None:
        await self._models.aclose()
