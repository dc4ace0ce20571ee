"""Plain HTTP routes served on the WebSocket port: ``GET /health``, ``GET /metrics``, the
bundled page and the embeddable JS client (static.py), and the checks a ``/ws`` upgrade must
pass before it is accepted (its Origin, an ``Upgrade`` request at all).

``/health`` tells everyone the status only; its details (models, file names, versions, counts)
go to an operator: with auth on, a request bearing a valid token; with auth off, one from this
machine. ``/metrics`` needs a token when auth is on. ``HEAD`` gets the headers without a body.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from ..serving import peer_address
from .auth import AuthError, TokenSigner, query_token
from .limits import Network, request_client
from .static import StaticFiles

__all__ = ["HttpRoutes", "origin_allowed", "response"]

WS_PATH = "/ws"

log = logging.getLogger(__name__)


def response(status: HTTPStatus, body: bytes | str, content_type: str,
             extra: dict[str, str] | None = None) -> web.Response:
    data = body.encode() if isinstance(body, str) else body
    return web.Response(status=status, body=data,
                        headers={"Content-Type": content_type, **(extra or {})})


def json_response(status: HTTPStatus, payload: Any) -> web.Response:
    return response(status, json.dumps(payload), "application/json",
                    {"Cache-Control": "no-store"})


def origin_allowed(origin: str | None, allowed: list[str], host: str | None = None) -> bool:
    """No Origin header (not a browser) passes; so does the page's own origin (its host and
    port are the request's ``Host``: our bundled page, wherever it is served); ``*`` allows all
    others; an entry without a port allows every port of that scheme and host. ``null`` (a
    sandboxed iframe, a ``file://`` page) passes only when listed, ``*`` does not cover it.
    A malformed Origin is refused."""
    if origin is None or origin in allowed:
        return True
    if origin == "null":
        return False
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        return False
    if not parts.scheme or not hostname:
        return False
    if host is not None and parts.netloc.lower() == host.strip().lower():
        return True
    return "*" in allowed or f"{parts.scheme}://{hostname}" in allowed


class HttpRoutes:
    """Answers non-WebSocket requests; returns None to let a ``/ws`` upgrade proceed. A
    ``HEAD`` gets the headers of its ``GET`` without the body (aiohttp leaves the body out)."""

    def __init__(self, *, health: Callable[[], Awaitable[dict[str, Any]]],
                 metrics: Callable[[], bytes], static_dir: Path | None,
                 allowed_origins: list[str],
                 extra: dict[str, Callable[[web.Request], Awaitable[web.Response]]]
                 | None = None,
                 signer: TokenSigner | None = None, trusted_proxies: Sequence[Network] = ()
                 ) -> None:
        self._health = health
        self._metrics = metrics
        self._static = StaticFiles(static_dir)
        self._allowed = allowed_origins
        self.extra = dict(extra or {})
        self._signer = signer
        self._trusted = trusted_proxies

    def _operator(self, request: web.Request) -> bool:
        """With auth on: the request bears a valid token (``Authorization: Bearer`` or
        ``?token=``). With auth off: it comes from this machine (through a trusted proxy, the
        client it forwards for)."""
        if self._signer is not None:
            header = request.headers.get("Authorization", "")
            token = header[7:].strip() if header[:7].lower() == "bearer " else \
                query_token(request.raw_path)
            try:
                self._signer.verify(token)
            except AuthError:
                return False
            return True
        client = request_client(peer_address(request), request.headers, self._trusted)
        try:
            return ipaddress.ip_address(client).is_loopback
        except ValueError:
            return False

    async def __call__(self, request: web.Request) -> web.Response | None:
        path = urlsplit(request.raw_path).path
        if path == WS_PATH:
            origin = request.headers.get("Origin")
            if not origin_allowed(origin, self._allowed, request.headers.get("Host")):
                log.warning("refused a WebSocket from origin %r: add it to allowed_origins "
                            "(--allowed-origins, VOICE_SERVER_ALLOWED_ORIGINS)",
                            str(origin)[:200])
                return response(HTTPStatus.FORBIDDEN, "origin not allowed\n", "text/plain")
            if "upgrade" not in request.headers.get("Connection", "").lower():
                return response(HTTPStatus.UPGRADE_REQUIRED,
                                "this endpoint speaks WebSocket (llmrtc v1)\n", "text/plain",
                                {"Upgrade": "websocket"})
            return None
        if path == "/health":
            report = await self._health()
            status = HTTPStatus.OK if report["status"] != "failed" else \
                HTTPStatus.SERVICE_UNAVAILABLE
            if not self._operator(request):  # no paths, versions, counts
                report = {"status": report["status"]}
            answer = json_response(status, report)
            # a page whose WebSocket failed asks this to tell "origin refused" from "down"
            # (``whyNotOpened`` in web_client/client/signaling.js): a CORS answer only to
            # origins the WebSocket allows
            origin = request.headers.get("Origin")
            if origin and origin_allowed(origin, self._allowed, request.headers.get("Host")):
                answer.headers["Access-Control-Allow-Origin"] = origin
            answer.headers["Vary"] = "Origin"
            return answer
        if path == "/metrics":
            if self._signer is not None and not self._operator(request):
                return response(HTTPStatus.UNAUTHORIZED, "a token is required\n", "text/plain",
                                {"WWW-Authenticate": "Bearer"})
            return response(HTTPStatus.OK, self._metrics(),
                            "text/plain; version=0.0.4; charset=utf-8")
        if path in self.extra:
            return await self.extra[path](request)
        if self._static.routes(path) and \
                (file := self._static.answer(path, request.headers)) is not None:
            return file
        return response(HTTPStatus.NOT_FOUND, "not found\n", "text/plain")
