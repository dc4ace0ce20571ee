"""Calling an ASGI application from an aiohttp handler: the MCP SDK's streamable HTTP transport
is written for ASGI, and the caller's port is served by aiohttp like every other port here.

``await call_asgi(app, request)`` builds the ASGI ``http`` scope from the request, hands the
app the request body as one ``http.request`` message, and streams what the app sends back as
the aiohttp response. ``receive()`` after the body waits until the response is finished or
the client went away, then answers ``http.disconnect`` (what a server-sent event stream
listens for).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

from ...serving import peer_address

__all__ = ["AsgiApp", "call_asgi"]

Message = MutableMapping[str, Any]
AsgiApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]


def _scope(request: web.Request) -> dict[str, Any]:
    transport = request.transport
    peer = peer_address(request)
    local = transport.get_extra_info("sockname") if transport is not None else None
    raw_path = request.raw_path.partition("?")[0]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": raw_path.encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": (str(peer[0]), int(peer[1])) if peer else None,
        "server": (str(local[0]), int(local[1])) if local else None,
        "state": {},
    }


async def call_asgi(app: AsgiApp, request: web.Request) -> web.StreamResponse:
    body = await request.read()
    finished = asyncio.Event()
    body_given = False
    response: web.StreamResponse | None = None

    async def receive() -> Message:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if finished.is_set():
            return  # the client is gone or the answer is complete: nothing more to write
        try:
            if message["type"] == "http.response.start":
                response = web.StreamResponse(status=message["status"])
                for name, value in message.get("headers", ()):
                    response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
                await response.prepare(request)
            elif message["type"] == "http.response.body":
                assert response is not None, "http.response.body before http.response.start"
                if chunk := message.get("body", b""):
                    await response.write(chunk)
                if not message.get("more_body", False):
                    await response.write_eof()
                    finished.set()
        except ConnectionError:
            finished.set()  # the app sees http.disconnect next

    try:
        await app(_scope(request), receive, send)
    finally:
        finished.set()
    if response is None:
        return web.Response(status=500, text="the application sent no response\n")
    return response
