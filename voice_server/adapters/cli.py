"""``voice-server sidecar NAME``: one subcommand per text-only sidecar adapter.

Each module listed in ``_SIDECARS`` exposes ``add_sidecar_parser(sidecar_subparsers)``
(top-level commands of an adapter, like ``host-chat``, are registered through
``voice_server.cli._COMMAND_MODULES``). The helpers below give every sidecar the same LLM
flags and run loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

from ..config import Settings, config_file_from_env, load_settings

__all__ = [
    "add_llm_flags",
    "register",
    "run_async",
    "serve_until_signal",
    "settings_from_args",
]

# One line per sidecar adapter module.
_SIDECARS: list[str] = [
    "voice_server.adapters.prompt.cli",
    "voice_server.adapters.caller.cli",
    "voice_server.adapters.broker.cli",
    "voice_server.adapters.host.cli",
]

_LLM_FLAGS = ("llm_provider", "llm_base_url", "llm_api_key", "llm_model", "llm_model_path",
              "llm_timeout_s", "llm_temperature", "llm_threads", "log_level")


def add_llm_flags(parser: argparse.ArgumentParser) -> None:
    """``--config`` plus the LLM settings shared with the voice server (same config, same env)."""
    parser.add_argument("--config", metavar="FILE",
                        help="YAML, TOML or JSON settings file (env VOICE_SERVER_CONFIG)")
    for name in _LLM_FLAGS:
        field = Settings.model_fields[name]
        kind = field.annotation if field.annotation in (int, float) else str
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None,
                            metavar="VALUE", type=kind,
                            help=f"{field.description} (env VOICE_SERVER_{name.upper()})")


def settings_from_args(args: argparse.Namespace) -> Settings:
    flags = {name: getattr(args, name, None) for name in _LLM_FLAGS}
    return load_settings(getattr(args, "config", None) or config_file_from_env(), **flags)


def run_async(main: Callable[[], Awaitable[int]], log_level: str = "INFO") -> int:
    """Run a sidecar's coroutine until it returns or Ctrl-C; LLM setup errors are one line."""
    from ..llm import LLMError

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return 0
    except (LLMError, OSError) as exc:
        print(f"voice-server: {exc}", file=sys.stderr)
        return 2


async def serve_until_signal() -> None:
    """Wait for SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def register(subparsers: argparse._SubParsersAction) -> None:
    sidecar = subparsers.add_parser("sidecar", help="run a text-only LLM sidecar adapter",
                                    description="Run one sidecar adapter over the LLM layer.")
    sidecar_sub = sidecar.add_subparsers(dest="sidecar", required=True)
    for name in _SIDECARS:
        importlib.import_module(name).add_sidecar_parser(sidecar_sub)
