"""What the sidecars share: their LLM flags, run loop and shutdown, and a stream server's
connection tasks.

A sidecar command builds its options from ``add_llm_flags`` + ``settings_from_args``, runs its
coroutine through ``run_async`` (one stderr line instead of a traceback when the model or the
port fails), and serves until ``wait_for_stop_signal`` returns. ``serve_sidecar`` does all of
that for a sidecar with a ``run_sidecar(router, config)`` context (the unit that
``adapters.launch`` also starts beside the voice server). The TCP sidecars (broker, host) serve
each peer in a task of ``ConnectionTasks`` and close streams with ``close_stream``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any

from ..config import Settings
from ..llm import LLMError, LLMRouter
from ..settings_flags import add_settings_flags, settings_from_args

__all__ = [
    "LLM_FLAGS",
    "ConnectionTasks",
    "add_llm_flags",
    "close_stream",
    "configure_logging",
    "run_async",
    "serve_sidecar",
    "settings_from_args",
    "stop_event",
    "stop_servers",
    "wait_for_stop_signal",
]

# The settings a sidecar takes from its command line (the rest come from the config file or env).
LLM_FLAGS = ("llm_provider", "llm_base_url", "llm_api_key", "llm_model", "llm_model_path",
             "llm_timeout_s", "llm_temperature", "llm_threads", "log_level")


def add_llm_flags(parser: argparse.ArgumentParser) -> None:
    """``--config`` plus the LLM settings shared with the voice server (same config, same env)."""
    add_settings_flags(parser, LLM_FLAGS)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def run_async(main: Callable[[], Awaitable[int]], log_level: str = "INFO") -> int:
    """Run a sidecar's coroutine until it returns or Ctrl-C; LLM setup errors are one line."""
    configure_logging(log_level)
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return 0
    except (LLMError, OSError) as exc:
        print(f"voice-server: {exc}", file=sys.stderr)
        return 2


def stop_event() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets (call it in the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def wait_for_stop_signal() -> None:
    """Wait for SIGINT or SIGTERM."""
    await stop_event().wait()


SidecarRunner = Callable[[LLMRouter, Any], AbstractAsyncContextManager[dict[str, str]]]


def serve_sidecar(run_sidecar: SidecarRunner, settings: Settings, config: Any) -> int:
    """Serve ``run_sidecar(router, config)`` over the router the settings describe until a stop
    signal; its addresses go to stdout as one JSON line once it listens."""
    async def main() -> int:
        from ..llm.registry import build_router

        router = build_router(settings)
        try:
            async with run_sidecar(router, config) as ready:
                print(json.dumps(ready), flush=True)
                await wait_for_stop_signal()
        finally:
            await router.aclose()
        return 0

    return run_async(main, settings.log_level)


class ConnectionTasks:
    """A stream server's peers, each served in a named task of its own, so that closing the
    server cancels them without cancelling asyncio's callback task (which logs spuriously on
    3.11 when cancelled)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self._count = 0

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        return frozenset(self._tasks)

    def add(self, task: asyncio.Task[Any]) -> None:
        """Count ``task`` as a peer's until it ends (or ``discard``)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def discard(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)

    async def serve(self, connection: Coroutine[Any, Any, None], writer: asyncio.StreamWriter,
                    *, count: bool = True) -> None:
        """Run ``connection`` in its own task (counted unless it counts itself), then close the
        writer, also when the task was cancelled before it ever ran."""
        self._count += 1
        task = asyncio.create_task(connection, name=f"{self._name}-conn-{self._count}")
        if count:
            self.add(task)
        await asyncio.wait([task])
        writer.close()

    async def cancel_all(self, timeout_s: float = 5.0) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)


async def stop_servers(servers: Iterable[asyncio.Server], connections: ConnectionTasks) -> None:
    """Stop listening, cancel every peer's task, then wait (bounded) for the servers to close."""
    servers = list(servers)
    for server in servers:
        server.close()
    await connections.cancel_all()
    for server in servers:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5.0)


async def close_stream(writer: asyncio.StreamWriter, timeout_s: float = 1.0) -> None:
    """Close a peer's stream and wait a little for it to go (a dead peer never acknowledges)."""
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), timeout_s)
