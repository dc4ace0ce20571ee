"""``voice-server sidecar NAME``: one subcommand per text-only sidecar adapter.

Each module listed in ``_SIDECARS`` exposes ``add_sidecar_parser(sidecar_subparsers)``
(top-level commands of an adapter, like ``host-chat``, are registered through
``voice_server.cli._COMMAND_MODULES``). What the sidecars share to run is in ``kit.py``.
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["register"]

# One line per sidecar adapter module.
_SIDECARS: list[str] = [
    "voice_server.adapters.prompt.cli",
    "voice_server.adapters.caller.cli",
    "voice_server.adapters.broker.cli",
    "voice_server.adapters.host.cli",
]


def register(subparsers: argparse._SubParsersAction) -> None:
    sidecar = subparsers.add_parser("sidecar", help="run a text-only LLM sidecar adapter",
                                    description="Run one sidecar adapter over the LLM layer.")
    sidecar_sub = sidecar.add_subparsers(dest="sidecar", required=True)
    for name in _SIDECARS:
        importlib.import_module(name).add_sidecar_parser(sidecar_sub)
