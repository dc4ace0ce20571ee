"""Plain HTTP routes served on the WebSocket port (websockets' ``process_request`` hook):
``GET /health``, ``GET /metrics``, the bundled page and the embeddable JS client."""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

__all__ = ["HttpRoutes", "origin_allowed", "response"]

WS_PATH = "/ws"


def response(status: HTTPStatus, body: bytes | str, content_type: str,
             extra: dict[str, str] | None = None) -> Response:
    data = body.encode() if isinstance(body, str) else body
    headers = Headers({"Content-Type": content_type, "Content-Length": str(len(data)),
                       "Connection": "close", **(extra or {})})
    return Response(status.value, status.phrase, headers, data)


def json_response(status: HTTPStatus, payload: Any) -> Response:
    return response(status, json.dumps(payload), "application/json",
                    {"Cache-Control": "no-store"})


def origin_allowed(origin: str | None, allowed: list[str]) -> bool:
    """No Origin header (not a browser) passes; ``*`` allows all; an entry without a port allows
    every port of that scheme and host."""
    if origin is None or "*" in allowed or origin in allowed:
        return True
    parts = urlsplit(origin)
    bare = f"{parts.scheme}://{parts.hostname}" if parts.hostname else origin
    return bare in allowed


class HttpRoutes:
    """Answers non-WebSocket requests; returns None to let a ``/ws`` upgrade proceed."""

    def __init__(self, *, health: Callable[[], Awaitable[dict[str, Any]]],
                 metrics: Callable[[], bytes], static_dir: Path | None,
                 allowed_origins: list[str],
                 extra: dict[str, Callable[[Request], Awaitable[Response]]] | None = None
                 ) -> None:
        self._health = health
        self._metrics = metrics
        self._static = static_dir
        self._allowed = allowed_origins
        self.extra = dict(extra or {})

    def _static_file(self, name: str, cache: str) -> Response:
        if self._static is None or not (self._static / name).is_file():
            return response(HTTPStatus.NOT_FOUND, "not found\n", "text/plain")
        path = self._static / name
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return response(HTTPStatus.OK, path.read_bytes(), ctype,
                        {"Cache-Control": cache, "Access-Control-Allow-Origin": "*"})

    async def __call__(self, connection: Any, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == WS_PATH:
            if not origin_allowed(request.headers.get("Origin"), self._allowed):
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
            return json_response(status, report)
        if path == "/metrics":
            return response(HTTPStatus.OK, self._metrics(),
                            "text/plain; version=0.0.4; charset=utf-8")
        if path in self.extra:
            return await self.extra[path](request)
        if path in ("/", "/index.html"):
            return self._static_file("index.html", "no-cache")
        if path == "/client/llmrtc.js":
            return self._static_file("llmrtc.js", "public, max-age=300")
        name = path.lstrip("/")
        if name in ("app.js", "style.css", "favicon.svg"):
            return self._static_file(name, "no-cache")
        return response(HTTPStatus.NOT_FOUND, "not found\n", "text/plain")
