"""``voice-server sidecar ...``: one subcommand per sidecar adapter.

Each module in ``_SIDECARS`` exposes ``add_sidecar_parser(sidecar_subparsers)``, which adds its
subcommand and sets ``func`` (parsed ``argparse.Namespace`` -> exit code).
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["register"]

# Sidecar modules; one line each.
_SIDECARS: list[str] = [
    "voice_server.adapters.caller.cli",
]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sidecar", help="run a protocol sidecar in front of the LLM",
                                   description="Run one sidecar adapter.")
    sidecars = parser.add_subparsers(dest="sidecar", required=True)
    for module in _SIDECARS:
        importlib.import_module(module).add_sidecar_parser(sidecars)
