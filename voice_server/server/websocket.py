"""The server side of one WebSocket as the llmrtc connection uses it: ``recv()`` gives the next
text (``str``) or binary (``bytes``) message or raises ``WebSocketClosed``; ``send()`` waits
while the socket's write buffer is over its limit (so a client that does not read holds back
its sender instead of growing our memory); ``close()`` sends a close code and reason.

It wraps aiohttp's ``WebSocketResponse`` and maps its message kinds and errors to those three
calls, so the connection code reads like a plain receive loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import WSMsgType, web
from multidict import CIMultiDictProxy

__all__ = ["ServerWebSocket", "WebSocketClosed"]

_CLOSED = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)
MAX_REASON_BYTES = 123  # a close frame's payload is at most 125 bytes with its code


class WebSocketClosed(Exception):
    """The socket is closed (by either side, or the connection was lost)."""


class ServerWebSocket:
    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        self.ws = ws
        self.path = request.raw_path  # as sent: the query (token, playbook) still in it
        self.headers: CIMultiDictProxy[str] = request.headers
        transport = request.transport
        assert transport is not None, "the request's connection is gone"
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.remote_address: Any = transport.get_extra_info("peername")

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code

    async def recv(self) -> str | bytes:
        while True:
            msg = await self.ws.receive()
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                return msg.data  # type: ignore[no-any-return]
            if msg.type in _CLOSED:
                raise WebSocketClosed(self.ws.close_code)
            # PING / PONG reach here only with autoping off: nothing to hand on

    async def send(self, text: str) -> None:
        if self.ws.closed:
            raise WebSocketClosed(self.ws.close_code)
        try:
            await self.ws.send_str(text)
        except (ConnectionError, RuntimeError) as exc:  # closing, or the transport is gone
            raise WebSocketClosed(self.ws.close_code) from exc

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close with ``code`` and ``reason``, waiting (up to the socket's close timeout) for
        the client's answering close frame. Closing a closed socket does nothing."""
        if self.ws.closed:
            return
        try:
            await self.ws.close(code=code, message=reason.encode()[:MAX_REASON_BYTES])
        except (ConnectionError, RuntimeError):
            self.transport.abort()
