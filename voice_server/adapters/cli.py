"""``voice-server sidecar NAME``: one subcommand per text-only sidecar adapter, plus the
commands a sidecar adds of its own (``prompt``, ``host-chat``).

Each sidecar in ``adapters.SIDECARS`` has a ``cli`` module whose ``register(commands,
sidecars)`` adds its ``sidecar NAME`` subcommand and any commands of its own. What the
sidecars share to run is in ``kit.py``.
"""

from __future__ import annotations

import argparse
import importlib

from . import SIDECARS

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    sidecar = subparsers.add_parser("sidecar", help="run a text-only LLM sidecar adapter",
                                    description="Run one sidecar adapter over the LLM layer.")
    sidecar_sub = sidecar.add_subparsers(dest="sidecar", required=True)
    for name in SIDECARS:
        importlib.import_module(f"{__package__}.{name}.cli").register(subparsers, sidecar_sub)
