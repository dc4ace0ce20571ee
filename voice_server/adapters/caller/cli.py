"""``voice-server sidecar caller [--host H] [--port P] [--stdio] ...``

Spec: specs/sidecar-llm-caller-mcp.md ("Integration context": 127.0.0.1:4037; "Dependencies and
contracts": client registry and provider catalog files in the original's formats). Options fall
back to the original's ``LLM_CALLER_*`` variables; the chat model of the default ``local``
provider follows the server's ``VOICE_SERVER_*`` settings (or ``--config``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from voice_server.config import ConfigError, config_file_from_env, env_value, load_settings

from ...llm import LLMError
from ...serving import os_error_text
from ..kit import run_async, serve_sidecar, sidecar_config
from .config import (
    CallerConfigError,
    CallerOptions,
    ClientRegistry,
    load_client_registry,
    load_providers,
)

__all__ = ["register", "run"]


def _whole(variable: str) -> Callable[[str], int]:
    """A flag's whole number; argparse also applies it to a default taken from ``variable``
    (a string), so a bad variable is a usage error that names it."""
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number (the flag's value, or {variable})") from None
    return parse


def register(commands: argparse._SubParsersAction,
             sidecars: argparse._SubParsersAction) -> None:
    p = sidecars.add_parser(
        "caller", help="LLM caller: HTTP + SSE on /mcp/..., MCP tools on /mcp or stdio",
        description="LLM caller sidecar (chat, chatStream, embed, listModels, getHealth).")
    p.add_argument("--host", default=env_value("LLM_CALLER_HOST") or "127.0.0.1",
                   help="listen address (env LLM_CALLER_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=_whole("LLM_CALLER_PORT"),
                   default=env_value("LLM_CALLER_PORT") or 4037,
                   help="TCP port (env LLM_CALLER_PORT; default 4037; 0 picks one)")
    p.add_argument("--stdio", action="store_true",
                   help="serve the MCP tools over stdin/stdout instead of HTTP")
    p.add_argument("--client-registry", metavar="FILE",
                   default=env_value("LLM_CALLER_CLIENT_REGISTRY"),
                   help='{"clients": [{"toolId", "token", "allowedMethods"}]} '
                        "(env LLM_CALLER_CLIENT_REGISTRY)")
    p.add_argument("--providers", metavar="FILE", default=env_value("LLM_CALLER_PROVIDERS"),
                   help='{"providers": {KEY: {"baseUrl", "defaultModel", "capabilities", '
                        '"defaults", "scores"} | {"kind": "local"}}} (env LLM_CALLER_PROVIDERS; '
                        "default: one provider 'local')")
    p.add_argument("--token", default=env_value("LLM_CALLER_TOKEN"),
                   help="without a registry: the one accepted token (all methods); with "
                        "--stdio: the token whose client the stdio caller acts as "
                        "(env LLM_CALLER_TOKEN)")
    p.add_argument("--rate-limit-max", type=_whole("LLM_CALLER_RATE_LIMIT_MAX"),
                   default=env_value("LLM_CALLER_RATE_LIMIT_MAX") or 0,
                   help="requests per window per client, 0 disables "
                        "(env LLM_CALLER_RATE_LIMIT_MAX)")
    p.add_argument("--rate-limit-interval-ms", type=_whole("LLM_CALLER_RATE_LIMIT_INTERVAL_MS"),
                   default=env_value("LLM_CALLER_RATE_LIMIT_INTERVAL_MS") or 60_000,
                   help="rate-limit window (env LLM_CALLER_RATE_LIMIT_INTERVAL_MS; default 60000)")
    p.add_argument("--retry-attempts", type=_whole("LLM_CALLER_RETRY_ATTEMPTS"),
                   default=env_value("LLM_CALLER_RETRY_ATTEMPTS") or 2,
                   help="chat attempts for TEMPORARY/RATE_LIMIT errors "
                        "(env LLM_CALLER_RETRY_ATTEMPTS; default 2)")
    p.add_argument("--config", metavar="FILE", default=config_file_from_env(),
                   help="server settings file (the local chat model)")
    p.set_defaults(func=run)


PROG = "voice-server sidecar caller"
_FAILURES = (((CallerConfigError, ConfigError), 2, lambda exc: getattr(exc, "message", exc)),
             (LLMError, 2, str), (OSError, 1, os_error_text))


def run(args: argparse.Namespace) -> int:
    from .sidecar import CallerSidecarConfig, run_sidecar

    options = sidecar_config(CallerOptions, rate_limit_max=args.rate_limit_max,
                             rate_limit_interval_ms=args.rate_limit_interval_ms,
                             retry_attempts=args.retry_attempts)
    if args.stdio:
        return run_async(lambda: _serve_stdio(args, options), prog=PROG, failures=_FAILURES)
    if not (args.client_registry or args.token):
        print(f"{PROG}: HTTP mode needs --client-registry FILE or --token TOKEN", file=sys.stderr)
        return 2
    config = sidecar_config(
        CallerSidecarConfig, host=args.host, port=args.port, client_registry=args.client_registry,
        token=args.token, providers=args.providers, options=options)
    return serve_sidecar(run_sidecar, load_settings(args.config), config, prog=PROG,
                         failures=_FAILURES)


async def _serve_stdio(args: argparse.Namespace, options: CallerOptions) -> int:
    """The MCP tools over stdin/stdout, acting as the ``--token``'s client (none: no client)."""
    from mcp.server.stdio import stdio_server

    from .mcp_tools import build_mcp_server
    from .sidecar import open_caller

    if args.client_registry:
        clients = load_client_registry(args.client_registry)
    else:
        clients = ClientRegistry.single(args.token) if args.token else ClientRegistry([])
    entries = load_providers(args.providers) if args.providers else None
    async with open_caller(entries, clients, options, load_settings(args.config)) as service:
        server = build_mcp_server(service, stdio_token=args.token)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    return 0
