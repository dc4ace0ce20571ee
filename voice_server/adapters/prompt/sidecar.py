"""The prompt service as one unit: its tool store, vault and both servers over one service.

Used by ``voice-server sidecar prompt`` and by ``adapters.launch`` (sidecars started beside
the voice server from config), where ``local`` tools run on the server's own embedded model.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import Field

from ...config import ConfigError, Settings
from ...llm import LLMRouter
from ..kit import StrictModel
from .errors import PromptError
from .server import DEFAULT_GRPC_PORT, DEFAULT_PORT, PromptSidecar
from .service import open_service

__all__ = ["PromptSidecarConfig", "run_sidecar"]


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
