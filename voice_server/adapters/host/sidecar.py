"""The host as one unit: TCP and/or Unix socket, optionally announced on Hyperswarm.

Used by ``voice-server sidecar host`` and by ``adapters.launch`` (sidecars started beside the
voice server from config).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import Field

from ...config import Settings
from ...llm import LLMRouter
from ..kit import StrictModel, with_defaults
from .server import HostOptions, HostServer

__all__ = ["HostSidecarConfig", "run_sidecar"]


class HostSidecarConfig(StrictModel):
    """Where the host listens, its Hyperswarm announcement, and its adapter options."""

    host: str = "127.0.0.1"
    port: int | None = Field(0, ge=0, le=65535, description="TCP port (0: a free one; "
                                                            "None: no TCP)")
    unix_path: str | None = None
    swarm_key: str | None = Field(None, description="announce on Hyperswarm under this key")
    swarm_bootstrap: str | None = None
    swarm_direct: bool = False
    options: HostOptions = Field(default_factory=HostOptions)


@contextlib.asynccontextmanager
async def run_sidecar(router: LLMRouter, config: HostSidecarConfig | Mapping[str, Any],
                      settings: Settings) -> AsyncIterator[dict[str, str]]:
    """Serve until the block exits; yields ``model`` and the addresses."""
    config = HostSidecarConfig.model_validate(config)
    options = with_defaults(config.options, temperature=settings.llm_temperature)
    async with contextlib.AsyncExitStack() as stack:
        server = await stack.enter_async_context(HostServer(
            router, options, host=config.host, port=config.port,
            unix_path=config.unix_path))
        ready = {"model": server.model_name}
        if server.port is not None:
            ready["tcp"] = f"{config.host}:{server.port}"
        if config.unix_path:
            ready["unix"] = config.unix_path
        if config.swarm_key:
            from .swarm import SwarmAnnouncer

            tcp = (config.host, server.port) if server.port is not None else None
            announcer = await stack.enter_async_context(SwarmAnnouncer(
                config.swarm_key, tcp=tcp, unix_path=None if tcp else config.unix_path,
                bootstrap=config.swarm_bootstrap, direct=config.swarm_direct))
            ready["server_id"] = announcer.server_id or ""
        yield ready
