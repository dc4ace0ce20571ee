"""Start sidecars beside the voice server from config.

``config`` maps a sidecar name to its options, e.g. ``{"broker": {"port": 8790, "http_port":
8791}, "host": {"port": 8792}, "caller": {"port": 4037, "token": "..."}, "prompt": {"port":
53051}}``; every sidecar shares the server's ``LLMRouter`` and settings. Each module in
``adapters.SIDECARS`` exposes its sidecar's ``run_sidecar`` (see ``kit``).
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
from . import SIDECARS
from .kit import validation_text

__all__ = ["check_sidecars", "launch_sidecars"]

_PORT_FIELDS = ("port", "http_port", "grpc_port")
_ANY_ADDRESS = {"", "0.0.0.0", "::"}


def check_sidecars(config: Mapping[str, Mapping[str, Any]] | None,
                   settings: Settings) -> dict[str, Any]:
    """The sidecars' options, validated before anything loads (``voice-server serve`` calls
    this before its models, which take seconds): known names, each one's options, and no port
    taken twice, the voice server's own included. Returns each sidecar's options model."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(SIDECARS))
    if unknown:
        raise ConfigError(f"unknown sidecars {unknown}; known: {sorted(SIDECARS)}")
    checked: dict[str, Any] = {}
    for name, options in config.items():
        module, model = SIDECARS[name]
        try:
            checked[name] = getattr(importlib.import_module(module), model).model_validate(
                options or {})
        except ValidationError as exc:
            raise ConfigError(f"sidecar {name!r}: {validation_text(exc)}") from exc
    taken = [(settings.host, port, f"the voice server's {field}")
             for field, port in (("port", settings.port), ("phone_port", settings.phone_port))
             if port]
    for name, options in checked.items():
        values = options.model_dump()
        for field in _PORT_FIELDS:
            port = values.get(field)
            if not port:  # absent or None: not served; 0: a free one
                continue
            for host, other, owner in taken:
                if port == other and (host == values["host"]
                                      or {host, values["host"]} & _ANY_ADDRESS):
                    raise ConfigError(f"sidecar {name!r}: {field} {port} is {owner} too; "
                                      "give it another")
            taken.append((values["host"], port, f"sidecar {name!r}'s {field}"))
    return checked


@contextlib.asynccontextmanager
async def launch_sidecars(router: LLMRouter, config: Mapping[str, Mapping[str, Any]] | None,
                          settings: Settings) -> AsyncIterator[dict[str, dict[str, str]]]:
    """Run the configured sidecars until the block exits; yields their addresses by name."""
    checked = check_sidecars(config, settings)
    async with contextlib.AsyncExitStack() as stack:
        ready: dict[str, dict[str, str]] = {}
        for name, options in checked.items():
            runner = importlib.import_module(SIDECARS[name][0]).run_sidecar
            try:
                context = runner(router, options, settings)
                ready[name] = await stack.enter_async_context(context)
            except ValidationError as exc:  # a file it reads (a registry, a catalog)
                raise ConfigError(f"sidecar {name!r}: {validation_text(exc)}") from exc
            except ConfigError as exc:
                raise ConfigError(f"sidecar {name!r}: {exc}") from exc
            except OSError as exc:  # its port: the server's own --port hint would mislead
                raise ConfigError(f"sidecar {name!r}: {os_error_text(exc)}") from exc
        yield ready
