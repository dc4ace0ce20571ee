"""The broker as one unit: TCP server plus optional HTTP proxy over one ``BrokerService``.

Used by ``voice-server sidecar broker`` and by ``adapters.launch`` (sidecars started beside
the voice server from config).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import Field

from ...config import Settings
from ...llm import LLMRouter
from ..kit import StrictModel, with_defaults
from .proxy import BrokerProxy
from .server import BrokerServer
from .service import BrokerOptions, BrokerService

__all__ = ["BrokerSidecarConfig", "run_sidecar"]


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
