"""``voice-server sidecar NAME``: one subcommand per text-only sidecar adapter.

Each module listed in ``_SIDECARS`` exposes ``add_sidecar_parser(sidecar_subparsers)``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["register"]

# Sidecar modules; one line each.
_SIDECARS: list[str] = [
    "voice_server.adapters.prompt.cli",
]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("sidecar", help="run a text-only LLM sidecar adapter")
    sub = parser.add_subparsers(dest="sidecar", required=True)
    for module in _SIDECARS:
        importlib.import_module(module).add_sidecar_parser(sub)
