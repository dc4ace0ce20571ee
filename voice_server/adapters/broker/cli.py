"""``voice-server sidecar broker``: the framed TCP broker and its HTTP proxy."""

from __future__ import annotations

import argparse

from ..kit import add_sidecar_command, serve_sidecar, settings_from_args, sidecar_config

__all__ = ["register"]


def _model_pair(text: str) -> tuple[str, str]:
    name, sep, spec = text.partition("=")
    if not name or not sep or not spec:
        raise argparse.ArgumentTypeError("expected NAME=MODEL (e.g. small=local)")
    return name, spec


def register(commands: argparse._SubParsersAction,
             sidecars: argparse._SubParsersAction) -> None:
    parser = add_sidecar_command(
        sidecars, "broker", _run,
        help="4-byte length-prefixed JSON over TCP, plus its HTTP proxy",
        description="Serve the broker wire protocol (and optionally its HTTP proxy).")
    parser.add_argument("--http-port", type=int, default=None,
                        help="also serve the HTTP proxy on this port (0: pick a free one)")
    parser.add_argument("--model", dest="models", action="append", type=_model_pair, default=[],
                        metavar="NAME=MODEL", help="a named model clients may request "
                        "(repeatable); MODEL is resolved by the LLM layer")
    parser.add_argument("--max-tokens", type=int, default=None, help="cap on answer tokens")
    parser.add_argument("--max-message-bytes", type=int, default=10_000_000,
                        help="largest accepted frame payload (default 10000000)")


def _run(args: argparse.Namespace) -> int:
    from .server import BrokerSidecarConfig, run_sidecar

    config = sidecar_config(
        BrokerSidecarConfig, host=args.host, port=args.port, http_port=args.http_port,
        options={"models": dict(args.models), "max_tokens": args.max_tokens,
                 "max_message_bytes": args.max_message_bytes})
    return serve_sidecar(run_sidecar, settings_from_args(args), config)
