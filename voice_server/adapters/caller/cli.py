"""``voice-server sidecar caller [--host H] [--port P] [--stdio] ...``

Spec: specs/sidecar-llm-caller-mcp.md ("Integration context": 127.0.0.1:4037; "Dependencies and
contracts": client registry and provider catalog files in the original's formats). Options fall
back to the original's ``LLM_CALLER_*`` variables; the chat model of the default ``local``
provider follows the server's ``VOICE_SERVER_*`` settings (or ``--config``).
"""

from __future__ import annotations

import argparse
import logging
from concurrent.futures import ThreadPoolExecutor

from voice_server.config import ConfigError, config_file_from_env, env_value, load_settings

from ...serving import os_error_text
from ..kit import run_async, stop_event
from .config import (
    CallerConfigError,
    CallerOptions,
    ClientRegistry,
    load_client_registry,
    load_providers,
)

__all__ = ["add_sidecar_parser", "run"]

log = logging.getLogger(__name__)


def add_sidecar_parser(sidecars: argparse._SubParsersAction) -> None:
    p = sidecars.add_parser(
        "caller", help="LLM caller: HTTP + SSE on /mcp/..., MCP tools on /mcp or stdio",
        description="LLM caller sidecar (chat, chatStream, embed, listModels, getHealth).")
    p.add_argument("--host", default=None, help="listen address (env LLM_CALLER_HOST; "
                                               "default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None,
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
    p.add_argument("--rate-limit-max", type=int, default=None,
                   help="requests per window per client, 0 disables "
                        "(env LLM_CALLER_RATE_LIMIT_MAX)")
    p.add_argument("--rate-limit-interval-ms", type=int, default=None,
                   help="rate-limit window (env LLM_CALLER_RATE_LIMIT_INTERVAL_MS; default 60000)")
    p.add_argument("--retry-attempts", type=int, default=None,
                   help="chat attempts for TEMPORARY/RATE_LIMIT errors "
                        "(env LLM_CALLER_RETRY_ATTEMPTS; default 2)")
    p.add_argument("--config", metavar="FILE", default=config_file_from_env(),
                   help="server settings file (the local chat model)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_async(lambda: _main(args), prog="voice-server sidecar caller", failures=(
        ((CallerConfigError, ConfigError), 2, lambda exc: getattr(exc, "message", exc)),
        (OSError, 1, os_error_text)))


async def _main(args: argparse.Namespace) -> int:
    from .http import CallerHTTPServer
    from .mcp_tools import build_mcp_server
    from .providers import build_runtimes
    from .service import CallerService

    options = CallerOptions.from_env(
        host=args.host, port=args.port, rate_limit_max=args.rate_limit_max,
        rate_limit_interval_ms=args.rate_limit_interval_ms, retry_attempts=args.retry_attempts)
    if args.client_registry:
        registry = load_client_registry(args.client_registry)
    elif args.token:
        registry = ClientRegistry.single(args.token)
    elif args.stdio:
        registry = ClientRegistry([])
    else:
        raise CallerConfigError("HTTP mode needs --client-registry FILE or --token TOKEN")
    entries = load_providers(args.providers) if args.providers else None
    settings = load_settings(args.config)
    with ThreadPoolExecutor(max_workers=settings.compute_workers,
                            thread_name_prefix="llm-caller") as executor:
        runtimes = build_runtimes(entries, settings, executor=executor)
        async with CallerService(runtimes, registry=registry, options=options) as service:
            if args.stdio:
                from mcp.server.stdio import stdio_server

                server = build_mcp_server(service, stdio_token=args.token)
                async with stdio_server() as (read, write):
                    await server.run(read, write, server.create_initialization_options())
                return 0
            stop = stop_event()
            server = build_mcp_server(service)
            async with CallerHTTPServer(service, server, host=options.host,
                                        port=options.port) as http:
                log.info("LLM caller on %s (REST /mcp/..., MCP /mcp)", http.url)
                await stop.wait()
            log.info("LLM caller stopped")
    return 0
