"""The caller as one unit: its client registry, provider catalog, service and HTTP port.

Used by ``voice-server sidecar caller`` and by ``adapters.launch`` (sidecars started beside
the voice server from config), where the catalog's ``local`` provider chats through the
server's own configured model.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from ...config import ConfigError, Settings
from ...llm import LLMProvider, LLMRouter
from ..kit import StrictModel
from .config import (
    CallerConfigError,
    CallerOptions,
    ClientRegistry,
    ProviderEntry,
    load_client_registry,
    load_providers,
)

if TYPE_CHECKING:
    from .service import CallerService

__all__ = ["CallerSidecarConfig", "open_caller", "run_sidecar"]


class CallerSidecarConfig(StrictModel):
    """Where the caller listens, who may call it, its provider catalog, and its options."""

    host: str = "127.0.0.1"
    port: int = Field(4037, ge=0, le=65535, description="TCP port (0: a free one)")
    client_registry: str | None = Field(None, description="the original's client-registry.json")
    token: str | None = Field(None, min_length=1,
                              description="without a registry: the one accepted token")
    providers: str | None = Field(None, description="the original's providers.json (None: one "
                                                    "provider 'local', the server's model)")
    options: CallerOptions = Field(default_factory=CallerOptions)

    @model_validator(mode="after")
    def _has_clients(self) -> CallerSidecarConfig:
        if not self.client_registry and not self.token:
            raise ValueError("the caller needs client_registry (a file) or token")
        return self


@contextlib.asynccontextmanager
async def open_caller(entries: dict[str, ProviderEntry] | None, clients: ClientRegistry,
                      options: CallerOptions, settings: Settings,
                      chat: LLMProvider | None = None) -> AsyncIterator[CallerService]:
    """The caller's service over its catalog (None: one provider ``local``); ``chat``: the
    configured chat provider lent by its owner (None: built from the settings, and closed)."""
    from .providers import build_runtimes
    from .service import CallerService

    with ThreadPoolExecutor(max_workers=settings.compute_workers,
                            thread_name_prefix="llm-caller") as executor:
        runtimes = build_runtimes(entries, settings, executor=executor, chat=chat)
        async with CallerService(runtimes, registry=clients, options=options) as service:
            yield service


@contextlib.asynccontextmanager
async def run_sidecar(router: LLMRouter, config: CallerSidecarConfig | Mapping[str, Any],
                      settings: Settings) -> AsyncIterator[dict[str, str]]:
    """Serve REST, SSE and MCP on one port until the block exits; yields its ``url``. A
    registry or catalog file that cannot be read or is invalid is a configuration error."""
    from .http import CallerHTTPServer
    from .mcp_tools import build_mcp_server

    config = CallerSidecarConfig.model_validate(config)
    try:
        clients = load_client_registry(config.client_registry) if config.client_registry \
            else ClientRegistry.single(config.token or "")
        entries = load_providers(config.providers) if config.providers else None
    except CallerConfigError as exc:
        raise ConfigError(exc.message) from exc
    async with open_caller(entries, clients, config.options, settings,
                           chat=router.default_provider) as service, \
            CallerHTTPServer(service, build_mcp_server(service), host=config.host,
                             port=config.port) as http:
        yield {"url": http.url}
