"""The prompt sidecar's servers: Connect JSON over HTTP and gRPC-JSON on a second port.

Spec: specs/sidecar-prompt-service.md "gRPC (JSON) Flow" and "Health & Readiness"
(docs/sidecar-prompt.md). The original Go service sniffs gRPC and HTTP/1.1 on one port; Python
cannot share a port between ``grpcio`` and an HTTP server, so gRPC gets its own. Both are thin:
the codec decides every byte, ``PromptService`` does the work.

``run_sidecar`` serves the prompt service as one unit, its tool store, vault and both servers over
one service, for ``voice-server sidecar prompt`` and ``adapters.launch`` (sidecars started beside
the voice server from config), where ``local`` tools run on the server's own embedded model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc
from aiohttp import web
from pydantic import Field

from ...config import ConfigError, Settings
from ...llm import LLMRouter
from ..kit import HTTPPort, StrictModel
from ..wire_json import compact_json
from .codec import (
    MAX_MESSAGE_BYTES,
    connect_error,
    connect_mode,
    connect_success,
    parse_run_request,
)
from .errors import InvalidArgument, PromptError
from .service import PromptService, open_service

__all__ = ["DEFAULT_GRPC_PORT", "DEFAULT_PORT", "RUN_PATH", "PromptSidecar", "PromptSidecarConfig",
           "run_sidecar"]

log = logging.getLogger(__name__)

SERVICE_NAME = "prompt.v1.PromptService"
RUN_PATH = f"/{SERVICE_NAME}/Run"
DEFAULT_PORT = 53051  # the original service's port, so its clients need no change
DEFAULT_GRPC_PORT = 53052


def _connect_timeout(value: str | None) -> float | None:
    """``Connect-Timeout-Ms`` (Connect protocol): up to 10 digits of milliseconds."""
    if value is None:
        return None
    if not value.isdigit() or len(value) > 10:
        raise InvalidArgument("invalid Connect-Timeout-Ms header")
    return int(value) / 1000.0


class PromptSidecar(HTTPPort):
    """``async with PromptSidecar(service, port=0, grpc_port=0) as sidecar:`` serves both
    protocols on ``host``; ``sidecar.port`` and ``sidecar.grpc_port`` are the bound ports.
    ``grpc_port=None`` leaves gRPC off."""

    name = "prompt sidecar"

    def __init__(self, service: PromptService, *, host: str = "127.0.0.1",
                 port: int = DEFAULT_PORT, grpc_port: int | None = DEFAULT_GRPC_PORT) -> None:
        super().__init__(host=host, port=port)
        self.service = service
        self.grpc_port = grpc_port
        self._grpc: grpc.aio.Server | None = None

    async def start(self) -> None:
        await super().start()
        if self.grpc_port is not None:
            await self._start_grpc()

    async def aclose(self) -> None:
        """Stop both servers (idempotent)."""
        server, self._grpc = self._grpc, None
        if server is not None:
            await server.stop(grace=1.0)
        await super().aclose()

    async def _run(self, body: bytes, timeout_s: Callable[[], float | None]) -> dict[str, Any]:
        """Parse one request, then run it within ``timeout_s()`` seconds (asked once parsed);
        a request past it is ``deadline_exceeded``."""
        run = parse_run_request(body)
        try:
            async with asyncio.timeout(timeout_s()):
                return await self.service.run(run)
        except TimeoutError:
            raise PromptError("the deadline expired", code="deadline_exceeded") from None

    # HTTP: /health and Connect --------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_MESSAGE_BYTES)
        app.router.add_get("/health", self._health, allow_head=False)
        app.router.add_route("*", RUN_PATH, self._connect_run)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', content_type="application/json")

    async def _not_found(self, request: web.Request) -> web.Response:
        # a wrong path or method gets Go's plain-text 404, as the original's clients expect
        return web.Response(status=404, text="404 page not found\n")

    async def _connect_run(self, request: web.Request) -> web.Response:
        """``POST /prompt.v1.PromptService/Run``: Connect unary JSON, as the original answers it."""
        if request.method != "POST":
            return await self._not_found(request)
        mode = connect_mode(request.headers.get("Content-Type"))
        try:
            if mode == "unsupported":
                raise InvalidArgument("unsupported codec")
            timeout = _connect_timeout(request.headers.get("Connect-Timeout-Ms"))
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise InvalidArgument("request body too large") from None
            status, headers, payload = connect_success(mode, await self._run(body, lambda: timeout))
        except PromptError as exc:
            status, headers, payload = connect_error(mode, exc)
        except Exception:
            log.exception("prompt Run failed")
            status, headers, payload = connect_error(mode, PromptError("internal error"))
        return web.Response(status=status, headers=headers, body=payload)

    # gRPC with a JSON codec -----------------------------------------------------------------
    async def _start_grpc(self) -> None:
        handler = grpc.method_handlers_generic_handler(SERVICE_NAME, {
            # no (de)serializers: the handler sees and returns the raw JSON bytes
            "Run": grpc.unary_unary_rpc_method_handler(self._grpc_run),
        })
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.so_reuseport", 0)]
        self._grpc = grpc.aio.server(handlers=[handler], options=options)
        self.grpc_port = self._grpc.add_insecure_port(f"{self.host}:{self.grpc_port}")
        if not self.grpc_port:
            raise OSError(f"cannot bind the gRPC port on {self.host}")
        await self._grpc.start()

    async def _grpc_run(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Unary ``Run`` over gRPC with the JSON codec: JSON in, JSON out; errors -> gRPC status
        numbers (errors.py)."""
        error: PromptError
        try:
            return compact_json(await self._run(request, context.time_remaining))
        except PromptError as exc:
            error = exc
        except Exception:
            log.exception("prompt Run (gRPC) failed")
            error = PromptError("internal error")
        await context.abort(_grpc_code(error), error.message)
        raise AssertionError("unreachable")  # pragma: no cover - abort raises


def _grpc_code(error: PromptError) -> grpc.StatusCode:
    # grpcio spells "canceled" (the status code document's word) CANCELLED
    return grpc.StatusCode[error.code.upper().replace("CANCELED", "CANCELLED")]


class PromptSidecarConfig(StrictModel):
    """Where the prompt service listens and where its tool configurations and secrets live."""

    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="Connect/HTTP port (0: a free "
                                                                "one)")
    grpc_port: int | None = Field(DEFAULT_GRPC_PORT, ge=0, le=65535,
                                  description="gRPC-JSON port (0: a free one; None: no gRPC)")
    db: str | None = Field(None, description="tool store: postgres:// DSN or SQLite file "
                                             "(None: DATA_DIR/prompt-tools.sqlite3)")
    data_dir: str | None = None
    secrets_file: str | None = Field(None, description="API-key secrets (None: "
                                                       "DATA_DIR/secrets.env)")


@contextlib.asynccontextmanager
async def run_sidecar(router: LLMRouter, config: PromptSidecarConfig | Mapping[str, Any],
                      settings: Settings) -> AsyncIterator[dict[str, str]]:
    """Serve until the block exits; yields the addresses (``connect`` and maybe ``grpc``).
    A tool store that cannot be opened is a configuration error."""
    config = PromptSidecarConfig.model_validate(config)
    async with contextlib.AsyncExitStack() as stack:
        try:
            service = await stack.enter_async_context(open_service(
                db=config.db, data_dir=config.data_dir, secrets_file=config.secrets_file,
                settings=settings, local=router.providers.get("local")))
        except PromptError as exc:
            raise ConfigError(f"prompt tool store: {exc}") from exc
        sidecar = await stack.enter_async_context(PromptSidecar(
            service, host=config.host, port=config.port, grpc_port=config.grpc_port))
        ready = {"connect": f"http://{config.host}:{sidecar.port}"}
        if sidecar.grpc_port is not None:
            ready["grpc"] = f"{config.host}:{sidecar.grpc_port}"
        yield ready
