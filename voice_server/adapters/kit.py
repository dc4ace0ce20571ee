"""What the sidecars share: their LLM flags, run loop and shutdown, and their servers.

A sidecar command gets its parser from ``add_sidecar_command`` (listen flags plus the LLM flags
of ``add_llm_flags``, read back with ``settings_from_args``), runs its coroutine through
``run_async`` (one stderr line instead of a traceback when the model or the port fails) and
serves until ``stop_event()`` is set. ``serve_sidecar`` does all of that for a sidecar's
``run_sidecar(router, config, settings)``, an async context manager yielding its addresses and
the unit ``adapters.launch`` also starts beside the voice server (``settings`` give the LLM
defaults the sidecar's own options leave unset: ``with_defaults``).

Servers and clients are ``AsyncService``s (``async with`` over ``start`` / ``aclose``). The
stream sidecars (broker, host) are ``StreamServer``s: TCP and/or a Unix socket, each peer in a
``ConnectionTasks`` task, streams closed with ``close_stream``. The HTTP ports (the broker's
proxy, the caller, the prompt service) are ``HTTPPort``s over ``serving.Site``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, ValidationError

from ..config import ConfigError, Settings, validation_text
from ..llm import LLMError, LLMRouter
from ..serving import AsyncService, Site, os_error_text
from ..settings_flags import add_settings_flags, settings_from_args

__all__ = [
    "LLM_FLAGS",
    "AsyncService",
    "ConnectionTasks",
    "HTTPPort",
    "StreamServer",
    "StrictModel",
    "add_llm_flags",
    "add_sidecar_command",
    "close_stream",
    "run_async",
    "serve_sidecar",
    "settings_from_args",
    "sidecar_config",
    "stop_event",
    "stop_servers",
    "validation_text",
    "with_defaults",
]

log = logging.getLogger(__name__)

# The settings a sidecar takes from its command line (the rest come from the config file or env).
LLM_FLAGS = ("llm_provider", "llm_base_url", "llm_api_key", "llm_model", "llm_model_path",
             "llm_timeout_s", "llm_temperature", "llm_threads", "llm_cpu_kernels", "log_level")


def add_llm_flags(parser: argparse.ArgumentParser) -> None:
    """``--config`` plus the LLM settings shared with the voice server (same config, same env)."""
    add_settings_flags(parser, LLM_FLAGS)


def add_sidecar_command(sidecars: argparse._SubParsersAction, name: str,
                        func: Callable[[argparse.Namespace], int], *, help: str,
                        description: str | None = None, port: int = 0,
                        port_help: str = "TCP port (0: pick a free one)"
                        ) -> argparse.ArgumentParser:
    """``voice-server sidecar NAME`` with the listen flags (``--host``, ``--port``) and the LLM
    flags; the caller adds the sidecar's own flags."""
    parser = sidecars.add_parser(name, help=help, description=description)
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=port, help=port_help)
    add_llm_flags(parser)
    parser.set_defaults(func=func)
    return parser


# (exception classes, exit code, the text printed after the program name)
Failure = tuple[type[BaseException] | tuple[type[BaseException], ...], int,
                Callable[[Any], object]]
LLM_SETUP_FAILURES: tuple[Failure, ...] = ((LLMError, 2, str), (OSError, 2, os_error_text))


def run_async(main: Callable[[], Awaitable[int]], log_level: str | None = "INFO", *,
              prog: str = "voice-server", interrupted: int = 0,
              failures: Sequence[Failure] = LLM_SETUP_FAILURES) -> int:
    """Run a command's coroutine until it returns, or Ctrl-C (exit ``interrupted``). An
    exception listed in ``failures`` (the LLM setup's, by default) is one stderr line
    ``PROG: text`` and its exit code (an ``exit_code`` attribute wins), not a traceback."""
    if log_level is not None:
        logging.basicConfig(level=log_level.upper(),
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return interrupted
    except Exception as exc:
        for kinds, code, text in failures:
            if isinstance(exc, kinds):
                print(f"{prog}: {text(exc)}", file=sys.stderr)
                return getattr(exc, "exit_code", code)
        raise


def stop_event() -> asyncio.Event:
    """An event that SIGINT or SIGTERM sets (call it in the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


_Options = TypeVar("_Options", bound=BaseModel)
SidecarRunner = Callable[[LLMRouter, Any, Settings],
                         AbstractAsyncContextManager[dict[str, str]]]


def serve_sidecar(run_sidecar: SidecarRunner, settings: Settings, config: Any, *,
                  prog: str = "voice-server",
                  failures: Sequence[Failure] = LLM_SETUP_FAILURES) -> int:
    """Serve ``run_sidecar(router, config, settings)`` over the router the settings describe
    until a stop signal; its addresses go to stdout as one JSON line once it listens."""
    async def main() -> int:
        from ..llm.registry import build_router

        router = build_router(settings)
        try:
            async with run_sidecar(router, config, settings) as ready:
                print(json.dumps(ready), flush=True)
                await stop_event().wait()
        finally:
            await router.aclose()
        return 0

    return run_async(main, settings.log_level, prog=prog, failures=failures)


def sidecar_config(model: type[_Options], **values: Any) -> _Options:
    """A sidecar's config from its command line; a value out of range (``--port 70000``) is a
    ``ConfigError`` (one line from ``voice-server``), not a traceback."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(validation_text(exc)) from None


def with_defaults(options: _Options, **defaults: Any) -> _Options:
    """``options`` with each named field that is ``None`` set to its default (the settings'
    temperature and timeout for a sidecar whose own options leave them open)."""
    unset = {name: value for name, value in defaults.items() if getattr(options, name) is None}
    return options.model_copy(update=unset) if unset else options


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


class StrictModel(BaseModel):
    """The sidecars' options and config files: an unknown key is an error, and so is a number
    that is not finite (NaN passed ``le`` checks only to fail with "should be less than")."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StreamServer(AsyncService):
    """A TCP port and/or a Unix socket; each peer is admitted (``admit``) and served
    (``serve_peer``) in a task of its own. ``port=None`` disables TCP (0: a free port);
    ``serve_stream`` serves any other byte stream (a bridge, a pipe) the same way."""

    name = "stream"

    def __init__(self, *, host: str = "127.0.0.1", port: int | None = 0,
                 unix_path: str | os.PathLike[str] | None = None) -> None:
        self.host = host
        self.port = port
        self.unix_path = os.fspath(unix_path) if unix_path is not None else None
        self._servers: list[asyncio.Server] = []
        self._connections = ConnectionTasks(self.name)
        self._stopping = False  # aclose() has begun: a peer whose task starts now is not served

    @property
    def connections(self) -> int:
        """Peers being served now."""
        return len(self._connections)

    @property
    def connection_tasks(self) -> frozenset[asyncio.Task[Any]]:
        """The running connection tasks (await them to see a peer fully handled)."""
        return self._connections.tasks

    async def start(self) -> None:
        self._stopping = False
        if self.port is not None:
            server = await asyncio.start_server(self._accept, self.host, self.port)
            self._servers.append(server)
            self.port = server.sockets[0].getsockname()[1]
            log.info("%s listening on %s:%d", self.name, self.host, self.port)
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.stat(self.unix_path).st_mode):
                    os.unlink(self.unix_path)  # a stale socket from an earlier run
            self._servers.append(await asyncio.start_unix_server(self._accept, self.unix_path))
            log.info("%s listening on unix:%s", self.name, self.unix_path)

    async def aclose(self) -> None:
        """Stop listening and cancel every peer's task; safe to call twice."""
        self._stopping = True
        servers, self._servers = self._servers, []
        await stop_servers(servers, self._connections)
        if servers and self.unix_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # serve_stream counts the peer itself, once it is admitted
        await self._connections.serve(self.serve_stream(reader, writer), writer, count=False)

    async def admit(self, writer: asyncio.StreamWriter) -> bool:
        """Whether to serve a new peer (a refusal is written to ``writer`` first)."""
        return True

    async def serve_peer(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def serve_stream(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        """Serve one peer on any byte stream until it closes; the writer is closed after."""
        task = asyncio.current_task()
        try:
            if self._stopping or not await self.admit(writer):
                return
            if task is not None:
                self._connections.add(task)
            await self.serve_peer(reader, writer)
        except (ConnectionError, TimeoutError) as exc:
            log.debug("%s connection ended: %s", self.name, exc)
        finally:
            if task is not None:
                self._connections.discard(task)
            await close_stream(writer)


class HTTPPort(AsyncService):
    """An aiohttp application (``app()``) served on ``host:port`` through ``serving.Site``
    (port 0: a free one); ``port`` is the bound port once started."""

    name = "http"
    shutdown_timeout_s = 10.0
    cancel_on_disconnect = False  # see ``serving.Site``

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._site: Site | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        raise NotImplementedError

    async def start(self) -> None:
        self._site = await Site(self.app(), self.host, self.port,
                                shutdown_timeout_s=self.shutdown_timeout_s,
                                cancel_on_disconnect=self.cancel_on_disconnect).start()
        self.port = self._site.port
        log.info("%s listening on %s", self.name, self.url)

    async def aclose(self) -> None:
        site, self._site = self._site, None
        if site is not None:
            await site.aclose()
