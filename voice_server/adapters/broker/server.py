"""The broker's asyncio TCP server: a thin shell moving bytes through ``FrameDecoder``.

Spec "Transport framing": the original answers one request per connection; we also
answer further frames on the same connection, in order. A framing failure (oversize prefix,
bad UTF-8 or JSON, not an object) is answered with one error frame; an oversize prefix then
closes the connection, since the stream cannot be resynchronised. A close inside a length prefix
gets no reply; a close inside a payload is answered ``{"correlation_id": null, "error":
"Connection error", "results": null}``, as the original's connection-error path does,
for a client that only half-closed and still reads.

``run_sidecar`` serves the broker as one unit, the TCP server plus the optional HTTP proxy over
one ``BrokerService``, for ``voice-server sidecar broker`` and ``adapters.launch`` (sidecars
started beside the voice server from config).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import Field

from ...config import Settings
from ...llm import LLMRouter
from ..kit import StreamServer, StrictModel, with_defaults
from .codec import FrameDecoder, encode_frame
from .errors import FrameTooLarge, FrameTruncated
from .messages import WireRequest, WireResponse, safe_error_message, try_parse_request
from .proxy import BrokerProxy
from .service import BrokerOptions, BrokerService

__all__ = ["BrokerServer", "BrokerSidecarConfig", "run_sidecar"]

log = logging.getLogger(__name__)

_READ_SIZE = 65536


class BrokerServer(StreamServer):
    """``async with BrokerServer(service, host="127.0.0.1", port=0) as server: server.port``."""

    name = "broker"

    def __init__(self, service: BrokerService, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host=host, port=port)
        self.service = service

    async def _send(self, writer: asyncio.StreamWriter, response: WireResponse) -> None:
        try:
            frame = encode_frame(response.to_dict(), max_bytes=self.service.options.
                                 max_message_bytes)
        except FrameTooLarge as exc:
            frame = encode_frame(WireResponse(correlation_id=response.correlation_id,
                                              error=str(exc)).to_dict())
        writer.write(frame)
        await writer.drain()

    async def serve_peer(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        options = self.service.options
        decoder = FrameDecoder(max_bytes=options.max_message_bytes)
        while True:
            async with asyncio.timeout(options.idle_timeout_s):
                data = await reader.read(_READ_SIZE)
            if not data:
                try:
                    decoder.eof()
                except FrameTruncated as exc:
                    log.info("broker client closed mid-frame: %s", exc)
                    if exc.in_payload:
                        with contextlib.suppress(ConnectionError, OSError):
                            await self._send(writer, WireResponse(error=safe_error_message(exc)))
                return
            try:
                payloads = decoder.feed(data)
            except FrameTooLarge as exc:
                await self._send(writer, WireResponse(error=str(exc)))
                return
            for payload in payloads:
                parsed = try_parse_request(payload)
                if isinstance(parsed, WireRequest):
                    try:
                        response = await self.service.handle(parsed)
                    except Exception as exc:  # last line of defence: no traceback on the wire
                        log.exception("broker request failed")
                        response = WireResponse(correlation_id=parsed.correlation_id,
                                                error=safe_error_message(exc))
                else:
                    response = parsed
                await self._send(writer, response)


class BrokerSidecarConfig(StrictModel):
    """Where the broker listens, and its adapter options."""

    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535, description="TCP port (0: a free one)")
    http_port: int | None = Field(None, ge=0, le=65535,
                                  description="HTTP proxy port (None: no proxy)")
    options: BrokerOptions = Field(default_factory=BrokerOptions)


@contextlib.asynccontextmanager
async def run_sidecar(router: LLMRouter, config: BrokerSidecarConfig | Mapping[str, Any],
                      settings: Settings) -> AsyncIterator[dict[str, str]]:
    """Serve until the block exits; yields the addresses (``broker`` and maybe ``http``)."""
    config = BrokerSidecarConfig.model_validate(config)
    service = BrokerService(router, with_defaults(
        config.options, temperature=settings.llm_temperature,
        request_timeout_s=settings.llm_timeout_s))
    async with contextlib.AsyncExitStack() as stack:
        server = await stack.enter_async_context(
            BrokerServer(service, host=config.host, port=config.port))
        ready = {"broker": f"{config.host}:{server.port}"}
        if config.http_port is not None:
            proxy = await stack.enter_async_context(
                BrokerProxy(service, host=config.host, port=config.http_port))
            ready["http"] = proxy.url
        yield ready
