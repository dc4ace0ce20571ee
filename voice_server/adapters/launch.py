"""Start sidecars beside the voice server from config.

``config`` maps a sidecar name to its options, e.g. ``{"broker": {"port": 8790, "http_port":
8791}, "host": {"port": 8792}, "caller": {"port": 4037, "token": "..."}, "prompt": {"port":
53051}}``; every sidecar shares the server's ``LLMRouter`` and settings. Each module in
``_RUNNERS`` exposes ``run_sidecar(router, config, settings)``, an async context manager
yielding its addresses (``kit.serve_sidecar`` runs the same unit alone).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import ValidationError

from ..config import ConfigError, Settings
from ..llm import LLMRouter
from ..serving import os_error_text
from .kit import validation_text

__all__ = ["launch_sidecars"]

# One line per sidecar adapter that can run beside the voice server.
_RUNNERS: dict[str, str] = {
    "broker": "voice_server.adapters.broker.sidecar",
    "host": "voice_server.adapters.host.sidecar",
    "caller": "voice_server.adapters.caller.sidecar",
    "prompt": "voice_server.adapters.prompt.sidecar",
}


@contextlib.asynccontextmanager
async def launch_sidecars(router: LLMRouter, config: Mapping[str, Mapping[str, Any]] | None,
                          settings: Settings) -> AsyncIterator[dict[str, dict[str, str]]]:
    """Run the configured sidecars until the block exits; yields their addresses by name."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(_RUNNERS))
    if unknown:
        raise ConfigError(f"unknown sidecars {unknown}; known: {sorted(_RUNNERS)}")
    async with contextlib.AsyncExitStack() as stack:
        ready: dict[str, dict[str, str]] = {}
        for name, options in config.items():
            runner = importlib.import_module(_RUNNERS[name]).run_sidecar
            try:
                context = runner(router, options or {}, settings)
                ready[name] = await stack.enter_async_context(context)
            except ValidationError as exc:
                raise ConfigError(f"sidecar {name!r}: {validation_text(exc)}") from exc
            except ConfigError as exc:
                raise ConfigError(f"sidecar {name!r}: {exc}") from exc
            except OSError as exc:  # its port: the server's own --port hint would mislead
                raise ConfigError(f"sidecar {name!r}: {os_error_text(exc)}") from exc
        yield ready
