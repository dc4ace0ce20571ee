"""Serving an aiohttp application on a host and port: the one place where every server of the
project (the voice server's port, the phone port, the sidecars' HTTP ports) starts listening,
learns the port it got (port 0 picks a free one) and stops.

``async with Site(app, host, port) as site:`` listens until the block ends; ``site.port`` is
the bound port. Stopping is in two steps so a server can drain: ``stop_accepting()`` closes the
listening socket and keeps the open connections; ``aclose()`` then waits up to
``shutdown_timeout_s`` for the handlers still running (a server closes its WebSockets first,
so they end at once) and cancels the rest.

``AsyncService`` is the lifecycle every long-lived part with something to open and close
shares (``async with`` over ``start`` / ``aclose``): the sidecars' servers and clients, the
voice server's responders.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
from typing import Any, Self

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["AsyncService", "Site", "check_listen", "os_error_text", "peer_address"]

log = logging.getLogger(__name__)


class AsyncService:
    """``async with service:`` runs ``start()`` (a start that fails is closed again) and, at
    the end, ``aclose()``; both do nothing unless a subclass says otherwise."""

    async def start(self) -> None:
        """Open what the service needs (listen, connect, spawn)."""

    async def aclose(self) -> None:
        """Close what ``start`` opened; safe to call twice."""

    async def close(self) -> None:
        """``aclose`` under the name the servers (and the swarm announcer) have always had."""
        await self.aclose()

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _BadRequestsInOneLine(logging.Filter):
    """aiohttp answers a request it cannot parse (a request line over 8,190 bytes, ``GET *``,
    a broken header) with a 400, and logs it as an ERROR with a traceback (aiohttp 3.14,
    ``RequestHandler.handle_error``): any client could fill the log with tracebacks. Such a
    record becomes one INFO line; a handler's own failure keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "refused a malformed HTTP request (%d): %s"
            record.args = (exc.code, str(exc.message)[:160])
            record.exc_info, record.exc_text = None, None
        return True


_requests_log = logging.getLogger(f"{__name__}.requests")  # aiohttp's request errors
_requests_log.addFilter(_BadRequestsInOneLine())


def os_error_text(exc: OSError) -> str:
    """What went wrong, for one line to the user: asyncio's "error while attempting to bind on
    address ('127.0.0.1', 8787): address already in use" without the "[errno 98] " that Python
    3.13 puts in it, and without the "[Errno 98] " prefix of ``str(exc)``."""
    return re.sub(r"\[errno \d+\] ", "", exc.strerror or str(exc), flags=re.IGNORECASE)


def check_listen(host: str | None, port: int | None) -> None:
    """Raise now the ``OSError`` listening on ``host``:``port`` would raise (in use, below 1024
    without privileges, not this machine's address), worded as asyncio words it: ``serve``
    asks before its models load, which takes seconds. Port 0 is always free (its host is
    checked); None is not served. A port taken in between is caught when the server listens."""
    if port is None:
        return
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:  # not an address, nor a name this machine resolves
        raise OSError(errno.EADDRNOTAVAIL, f"cannot listen on {host!r}: "
                                           f"{(exc.strerror or '').lower()}") from None
    if not port:  # port 0: any free one
        return
    for family, kind, proto, _name, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp listens
            try:
                probe.bind(address)
            except OSError as exc:
                raise OSError(exc.errno, "error while attempting to bind on address "
                                         f"{address[:2]!r}: {(exc.strerror or '').lower()}"
                              ) from None


def peer_address(request: web.Request) -> Any:
    """The TCP peer of ``request`` as the socket gives it ((host, port, ...)), or None when its
    connection is already gone."""
    transport = request.transport
    return transport.get_extra_info("peername") if transport is not None else None


class Site:
    def __init__(self, app: web.Application, host: str | None, port: int, *,
                 shutdown_timeout_s: float = 10.0, cancel_on_disconnect: bool = False) -> None:
        """``cancel_on_disconnect``: a handler still running when its client goes away is
        cancelled (a stream that waits on a slow upstream stops waiting); else it runs on."""
        self.app = app
        self.host = host
        self.requested_port = port
        self._shutdown_timeout_s = shutdown_timeout_s
        self._cancel_on_disconnect = cancel_on_disconnect
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._port: int | None = None

    async def start(self) -> Site:
        # No access log (a log line per static file or health probe drowns the turns) and no
        # signal handlers: the process that runs the server owns SIGINT and SIGTERM.
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                               shutdown_timeout=self._shutdown_timeout_s,
                               handler_cancellation=self._cancel_on_disconnect,
                               logger=_requests_log)
        await runner.setup()
        self._runner = runner
        try:
            self._site = web.TCPSite(runner, self.host, self.requested_port)
            await self._site.start()
        except BaseException:
            await self.aclose()
            raise
        self._port = runner.addresses[0][1]
        return self

    async def __aenter__(self) -> Site:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def port(self) -> int:
        """The bound port (the requested one, or the free one port 0 picked)."""
        assert self._port is not None, "the site has not started"
        return self._port

    @property
    def listening(self) -> bool:
        return self._site is not None

    async def stop_accepting(self) -> None:
        """Close the listening socket; connections already open go on."""
        site, self._site = self._site, None
        if site is not None:
            await site.stop()

    async def aclose(self) -> None:
        """Stop accepting, let running handlers finish (up to the shutdown timeout), close
        every connection. Idempotent."""
        await self.stop_accepting()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
