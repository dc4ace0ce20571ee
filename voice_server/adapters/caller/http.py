"""HTTP transport of the caller: the origin's REST + SSE routes and MCP on one port.

Spec: specs/sidecar-llm-caller-mcp.md, "Integration context" (loopback-only, 127.0.0.1:4037),
"Response metadata" and "Transport status & retry semantics". Routes as the origin serves them
(notes 3.2): ``POST /mcp/chat``, ``POST /mcp/chatStream`` (SSE ending with ``data: [DONE]``),
``POST /mcp/embed``, ``GET /mcp/models?provider=``, ``GET /health``; MCP streamable HTTP at
exactly ``/mcp`` (notes 3.4, "Route conflict"); the published schemas at
``GET /mcp/schemas/v1/<name>.schema.json``. Every answer carries ``x-trace-id``; error bodies
carry ``traceId``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..strict_json import loads_strict
from .errors import (
    CallerError,
    ProviderError,
    bad_request,
    forbidden,
    internal,
    retry_after_header,
    unauthorized,
)
from .mcp_tools import request_token
from .schemas import SCHEMA_NAMES, load_schema
from .service import CallerService
from .stream import DONE_FRAME, encode_event

__all__ = ["CallerHTTPServer", "build_app", "is_loopback"]

log = logging.getLogger(__name__)


def is_loopback(host: str | None) -> bool:
    """``127.0.0.1``, ``::1`` and ``::ffff:127.0.0.1`` (any 127/8 address) are loopback."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def _trace() -> str:
    return f"trace-{uuid.uuid4().hex}"


_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def _header_value(trace_id: str) -> str:
    """A trace id (often the client's ``requestId``) as an ``x-trace-id`` value: visible ASCII
    as is, anything else percent-encoded (UTF-8), so no id can break or inject a header. The
    JSON bodies keep the original."""
    if all("\x21" <= ch <= "\x7e" for ch in trace_id):
        return trace_id
    return quote(trace_id, safe=_HEADER_SAFE, errors="replace")


def _error_response(exc: CallerError, trace_id: str | None = None) -> JSONResponse:
    trace_id = trace_id or _trace()
    headers = {"x-trace-id": _header_value(trace_id)}
    if exc.retry_after_ms is not None:
        headers["Retry-After"] = retry_after_header(exc.retry_after_ms)
    return JSONResponse(exc.body(trace_id), status_code=exc.status, headers=headers)


class _LoopbackOnly:
    """ASGI guard: peers other than loopback get 403 before anything else runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            client = scope.get("client")
            if not is_loopback(client[0] if client else None):
                await _error_response(forbidden("Loopback access only"))(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _TokenGuard:
    """ASGI guard for the MCP endpoint: a registered token is required (401 / 403); per-tool
    permissions are checked by the tools themselves."""

    def __init__(self, app: ASGIApp, service: CallerService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        token = request_token(request.headers)
        if not token:
            await _error_response(unauthorized())(scope, receive, send)
            return
        if self.service.registry.lookup(token) is None:
            await _error_response(forbidden("Unknown client token"))(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _Routes:
    def __init__(self, service: CallerService, max_body: int) -> None:
        self.service = service
        self.max_body = max_body

    async def _json(self, request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.max_body:
            raise bad_request("Request body too large")
        raw = await request.body()
        if len(raw) > self.max_body:
            raise bad_request("Request body too large")
        try:
            return loads_strict(raw)
        except ValueError as exc:
            raise bad_request("Request body is not valid JSON") from exc

    async def _call(self, request: Request, method: str, what: str) -> Response:
        trace_id = None
        try:
            client = self.service.authorize(request_token(request.headers), method)
            body = await self._json(request)
            if isinstance(body, dict) and isinstance(body.get("requestId"), str):
                trace_id = body["requestId"]
            payload = await (self.service.chat if method == "chat" else
                             self.service.embed)(body, client)
        except CallerError as exc:
            return _error_response(exc, trace_id)
        except Exception:
            log.exception("%s failed", method)
            return _error_response(internal(f"{what} dispatch failed"), trace_id)
        headers = {"x-trace-id": _header_value(payload["traceId"])}
        if payload.get("retryAfterMs"):
            headers["Retry-After"] = retry_after_header(payload["retryAfterMs"])
        return JSONResponse(payload, headers=headers)

    async def chat(self, request: Request) -> Response:
        return await self._call(request, "chat", "Chat")

    async def embed(self, request: Request) -> Response:
        return await self._call(request, "embed", "Embed")

    async def chat_stream(self, request: Request) -> Response:
        trace_id = None
        try:
            client = self.service.authorize(request_token(request.headers), "chatStream")
            body = await self._json(request)
            if isinstance(body, dict) and isinstance(body.get("requestId"), str):
                trace_id = body["requestId"]
            events = self.service.open_stream(body, client)
        except CallerError as exc:
            return _error_response(exc, trace_id)
        except Exception:
            log.exception("chatStream failed")
            return _error_response(internal("Chat dispatch failed"), trace_id)
        return StreamingResponse(
            _sse(events), media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "Connection": "keep-alive",
                     "x-trace-id": _header_value(trace_id or _trace())})

    async def models(self, request: Request) -> Response:
        trace_id = _trace()
        try:
            self.service.authorize(request_token(request.headers), "models")
            payload = await self.service.list_models(request.query_params.get("provider"))
        except CallerError as exc:
            return _error_response(exc, trace_id)
        return JSONResponse(payload, headers={"x-trace-id": trace_id})

    async def health(self, request: Request) -> Response:
        trace_id = _trace()
        try:
            self.service.authorize(request_token(request.headers), "getHealth")
            payload = await self.service.health()
        except CallerError as exc:
            return _error_response(exc, trace_id)
        return JSONResponse(payload, headers={"x-trace-id": trace_id})

    async def schema(self, request: Request) -> Response:
        name = request.path_params["name"].removesuffix(".schema.json")
        if name not in SCHEMA_NAMES:
            return _error_response(CallerError(404, "NOT_FOUND", "Unknown schema"))
        return JSONResponse(load_schema(name), media_type="application/schema+json")


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Frames of one stream; a failure becomes the final error event, then ``[DONE]``."""
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        try:
            async for event in events:
                yield encode_event(event)
        except ProviderError as exc:
            yield encode_event(exc.body())  # origin: no traceId inside the stream error
        except CallerError as exc:
            yield encode_event(exc.body())
        except Exception:
            log.exception("chatStream failed mid-stream")
            yield encode_event({"error": "INTERNAL_ERROR", "message": "Chat stream failed"})
    yield DONE_FRAME


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(status, "INTERNAL_ERROR")
    message = {404: "Not found", 405: "Method not allowed"}.get(status, "Internal Error")
    return _error_response(CallerError(status, code, message))


def build_app(service: CallerService, mcp_server: Server[Any], *,
              max_body: int | None = None) -> ASGIApp:
    """The ASGI app: REST routes, schemas, MCP at ``/mcp``, all behind the loopback guard."""
    routes = _Routes(service, max_body or service.options.max_body_bytes)
    manager = StreamableHTTPSessionManager(
        app=mcp_server, stateless=True, json_response=False,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(
        routes=[
            Route("/mcp/chat", routes.chat, methods=["POST"]),
            Route("/mcp/chatStream", routes.chat_stream, methods=["POST"]),
            Route("/mcp/embed", routes.embed, methods=["POST"]),
            Route("/mcp/models", routes.models, methods=["GET"]),
            Route("/mcp/schemas/v1/{name}", routes.schema, methods=["GET"]),
            Route("/health", routes.health, methods=["GET"]),
            Route("/mcp", _TokenGuard(StreamableHTTPASGIApp(manager), service)),
        ],
        exception_handlers={404: _not_found, 405: _not_found},
        lifespan=lifespan,
    )
    return _LoopbackOnly(app)


class _Uvicorn(uvicorn.Server):
    """uvicorn with a readiness event and without its own signal handling (the owner decides
    when to stop: ``CallerHTTPServer.__aexit__``)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


class CallerHTTPServer:
    """``async with CallerHTTPServer(service, mcp_server, host=..., port=0) as srv: srv.port``"""

    def __init__(self, service: CallerService, mcp_server: Server[Any], *,
                 host: str = "127.0.0.1", port: int = 4037,
                 start_timeout_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self._app = build_app(service, mcp_server)
        self._start_timeout_s = start_timeout_s
        self._server: _Uvicorn | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def __aenter__(self) -> CallerHTTPServer:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted sockets inherit it: without it a keep-alive answer written as headers then
        # body waits ~40 ms for the delayed ACK of the first segment (Nagle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        sock.listen(512)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self._app, lifespan="on", log_level="warning", access_log=False,
                                timeout_graceful_shutdown=2)
        self._server = _Uvicorn(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]),
                                         name=f"llm-caller-http:{self.port}")
        ready = asyncio.create_task(self._server.ready.wait(), name="llm-caller-http-ready")
        done, _ = await asyncio.wait({ready, self._task}, timeout=self._start_timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if ready not in done:
            ready.cancel()
            await self.__aexit__(None, None, None)
            raise RuntimeError("the caller HTTP server did not start")
        return self

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set (or the server fails)."""
        if self._task is None:
            return
        waiter = asyncio.create_task(stop.wait(), name="llm-caller-http-stop")
        try:
            await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()

    async def __aexit__(self, *exc: object) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), 5.0)
        except TimeoutError:
            server.force_exit = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
