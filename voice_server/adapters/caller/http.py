"""HTTP transport of the caller: the original's REST + SSE routes and MCP on one port.

Spec: specs/sidecar-llm-caller-mcp.md, "Integration context" (loopback-only, 127.0.0.1:4037),
"Response metadata" and "Transport status & retry semantics". Routes as the original serves
them (docs/sidecar-caller.md): ``POST /mcp/chat``, ``POST /mcp/chatStream`` (SSE ending
with ``data: [DONE]``), ``POST /mcp/embed``, ``GET /mcp/models?provider=``, ``GET /health``;
MCP streamable HTTP at exactly ``/mcp`` (beside the REST routes, not in place of them); the
published schemas at ``GET /mcp/schemas/v1/<name>.schema.json``. Every answer carries
``x-trace-id``; error bodies carry ``traceId``.

Served by aiohttp like the project's other ports; the MCP SDK's transport is ASGI and is
called through ``asgi.call_asgi``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from ...serving import peer_address
from ..kit import HTTPPort
from ..wire_json import loads_strict
from .asgi import call_asgi
from .errors import CallerError, bad_request, forbidden, internal, retry_after_header, unauthorized
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


def _json_response(payload: Any, *, status: int = 200, headers: dict[str, str] | None = None,
                   content_type: str = "application/json") -> web.Response:
    """JSON as the original writes it: compact, UTF-8 (not ASCII-escaped), no NaN."""
    body = json.dumps(payload, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8")
    answer = web.Response(status=status, body=body, headers=headers)
    answer.content_type = content_type
    return answer


def _error_response(exc: CallerError, trace_id: str | None = None) -> web.Response:
    trace_id = trace_id or _trace()
    headers = {"x-trace-id": _header_value(trace_id)}
    if exc.retry_after_ms is not None:
        headers["Retry-After"] = retry_after_header(exc.retry_after_ms)
    return _json_response(exc.body(trace_id), status=exc.status, headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _loopback_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Peers other than loopback get 403 before anything else runs; a path or method we do
    not serve gets the taxonomy's JSON 404 / 405."""
    peer = peer_address(request)
    if not is_loopback(str(peer[0]) if peer else None):
        return _error_response(forbidden("Loopback access only"))
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _error_response(CallerError(404, "NOT_FOUND", "Not found"))
    except web.HTTPMethodNotAllowed:
        return _error_response(CallerError(405, "METHOD_NOT_ALLOWED", "Method not allowed"))


class _Routes:
    def __init__(self, service: CallerService, max_body: int,
                 manager: StreamableHTTPSessionManager) -> None:
        self.service = service
        self.max_body = max_body
        self._mcp = StreamableHTTPASGIApp(manager)

    async def _json(self, request: web.Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.max_body:
            raise bad_request("Request body too large")
        try:
            raw = await request.read()  # the application's client_max_size is max_body
        except web.HTTPRequestEntityTooLarge as exc:
            raise bad_request("Request body too large") from exc
        try:
            return loads_strict(raw)
        except ValueError as exc:
            raise bad_request("Request body is not valid JSON") from exc

    async def call(self, request: web.Request, method: str) -> web.StreamResponse:
        """``chat``, ``embed`` or ``chatStream``: the body's ``requestId`` is the trace id of the
        answer, also of an error; an unexpected failure is a logged INTERNAL_ERROR."""
        trace_id = None
        try:
            client = self.service.authorize(request_token(request.headers), method)
            body = await self._json(request)
            if isinstance(body, dict) and isinstance(body.get("requestId"), str):
                trace_id = body["requestId"]
            if method == "chatStream":
                result = self.service.open_stream(body, client)
            else:
                result = await getattr(self.service, method)(body, client)
        except CallerError as exc:
            return _error_response(exc, trace_id)
        except Exception:
            log.exception("%s failed", method)
            what = "Embed" if method == "embed" else "Chat"
            return _error_response(internal(f"{what} dispatch failed"), trace_id)
        if method == "chatStream":
            return await _stream(request, result, trace_id or _trace())
        return _json_response(result, headers={"x-trace-id": _header_value(result["traceId"])})

    async def _report(self, request: web.Request, method: str,
                      report: Callable[[], Awaitable[dict[str, Any]]]) -> web.Response:
        trace_id = _trace()
        try:
            self.service.authorize(request_token(request.headers), method)
            payload = await report()
        except CallerError as exc:
            return _error_response(exc, trace_id)
        return _json_response(payload, headers={"x-trace-id": trace_id})

    async def models(self, request: web.Request) -> web.Response:
        provider = request.query.get("provider")
        return await self._report(request, "models", lambda: self.service.list_models(provider))

    async def health(self, request: web.Request) -> web.Response:
        return await self._report(request, "getHealth", self.service.health)

    async def schema(self, request: web.Request) -> web.Response:
        name = request.match_info["name"].removesuffix(".schema.json")
        if name not in SCHEMA_NAMES:
            return _error_response(CallerError(404, "NOT_FOUND", "Unknown schema"))
        return _json_response(load_schema(name), content_type="application/schema+json")

    async def mcp(self, request: web.Request) -> web.StreamResponse:
        """MCP streamable HTTP: a registered token is required (401 / 403); per-tool
        permissions are checked by the tools themselves."""
        token = request_token(request.headers)
        if not token:
            return _error_response(unauthorized("Missing client token"))
        if self.service.registry.lookup(token) is None:
            return _error_response(forbidden("Unknown client token"))
        return await call_asgi(self._mcp, request)


async def _stream(request: web.Request, events: AsyncIterator[dict[str, Any]],
                  trace_id: str) -> web.StreamResponse:
    answer = web.StreamResponse(headers={
        "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
        "Connection": "keep-alive", "x-trace-id": _header_value(trace_id)})
    frames = _sse(events)
    async with contextlib.aclosing(frames):
        await answer.prepare(request)
        with contextlib.suppress(ConnectionError):  # the client went away mid-stream
            async for frame in frames:
                await answer.write(frame)
            await answer.write_eof()
    return answer


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Frames of one stream; a failure becomes the final error event, then ``[DONE]``."""
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        try:
            async for event in events:
                yield encode_event(event)
        except CallerError as exc:  # origin: no traceId inside the stream error
            yield encode_event(exc.body())
        except Exception:
            log.exception("chatStream failed mid-stream")
            yield encode_event({"error": "INTERNAL_ERROR", "message": "Chat stream failed"})
    yield DONE_FRAME


def _run_manager(manager: StreamableHTTPSessionManager
                 ) -> Callable[[web.Application], AsyncIterator[None]]:
    """The MCP session manager runs while the application does, in a task of its own (its
    task group must be left by the task that entered it)."""
    async def lifespan(app: web.Application) -> AsyncIterator[None]:
        started, stop = asyncio.Event(), asyncio.Event()

        async def run() -> None:
            async with manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(run(), name="llm-caller-mcp-sessions")
        waiter = asyncio.create_task(started.wait(), name="llm-caller-mcp-started")
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            await task  # raises why the manager did not start
        try:
            yield
        finally:
            stop.set()
            await task

    return lifespan


def build_app(service: CallerService, mcp_server: Server[Any]) -> web.Application:
    """REST routes, schemas and MCP at ``/mcp``, all behind the loopback guard."""
    manager = StreamableHTTPSessionManager(
        app=mcp_server, stateless=True, json_response=False,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]))
    limit = service.options.max_body_bytes
    routes = _Routes(service, limit, manager)
    app = web.Application(middlewares=[_loopback_only], client_max_size=limit)
    for method in ("chat", "chatStream", "embed"):
        app.router.add_post(f"/mcp/{method}", functools.partial(routes.call, method=method))
    app.router.add_get("/mcp/models", routes.models)
    app.router.add_get("/mcp/schemas/v1/{name}", routes.schema)
    app.router.add_get("/health", routes.health)
    app.router.add_route("*", "/mcp", routes.mcp)
    app.cleanup_ctx.append(_run_manager(manager))
    return app


class CallerHTTPServer(HTTPPort):
    """``async with CallerHTTPServer(service, mcp_server, host=..., port=0) as srv: srv.port``"""

    name = "LLM caller"
    shutdown_timeout_s = 2.0
    # a client that drops a stream cancels its handler, which closes the provider's stream
    cancel_on_disconnect = True

    def __init__(self, service: CallerService, mcp_server: Server[Any], *,
                 host: str = "127.0.0.1", port: int = 4037) -> None:
        super().__init__(host=host, port=port)
        self.service = service
        self.mcp_server = mcp_server

    def app(self) -> web.Application:
        return build_app(self.service, self.mcp_server)
