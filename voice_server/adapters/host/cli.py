"""``voice-server sidecar host`` (serve) and ``voice-server host-chat`` (talk to a host)."""

from __future__ import annotations

import argparse
import sys

from ..kit import add_sidecar_command, run_async, serve_sidecar, settings_from_args, sidecar_config

__all__ = ["register"]


def register(commands: argparse._SubParsersAction,
             sidecars: argparse._SubParsersAction) -> None:
    """``voice-server sidecar host`` and ``voice-server host-chat``."""
    _add_host_chat(commands)
    parser = add_sidecar_command(
        sidecars, "host", _serve, help="NDJSON chat host over TCP and/or a Unix socket",
        description="Serve the NDJSON host protocol (server_info / chat_start / chat_chunk / "
                    "chat_end / abort) over the LLM layer.")
    parser.add_argument("--no-tcp", action="store_true", help="serve the Unix socket only")
    parser.add_argument("--unix", metavar="PATH", help="also serve on this Unix socket")
    parser.add_argument("--host-name", help="name sent in server_info (default: hostname)")
    parser.add_argument("--model", help="LLM-layer model to serve (default: the configured one)")
    parser.add_argument("--max-clients", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="generations at once across all clients (default 1)")
    parser.add_argument("--max-tokens", type=int, default=None)
    _add_swarm_flags(parser, "also announce the host on Hyperswarm under this key "
                     "(a base58 Server ID, or any text hashed to a topic)")


def _add_swarm_flags(parser: argparse.ArgumentParser, key_help: str) -> None:
    parser.add_argument("--swarm-key", metavar="KEY", help=key_help)
    parser.add_argument("--swarm-bootstrap", metavar="HOST:PORT,...",
                        help="DHT bootstrap nodes (default: the public Hyperswarm DHT)")
    parser.add_argument("--swarm-direct", action="store_true",
                        help="this node is reachable without holepunching (local testnet)")


def _add_host_chat(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "host-chat", help="chat with an NDJSON host (TCP, Unix socket or Hyperswarm bridge)",
        description="Send prompts to a host and stream the answers to stdout. Without PROMPT, "
                    "read one prompt per line from stdin.")
    parser.add_argument("prompt", nargs="?", help="the prompt (default: read lines from stdin)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="TCP port of the host")
    parser.add_argument("--unix", metavar="PATH", help="Unix socket of the host")
    parser.add_argument("--bridge", metavar="CMD", help="a bridge command whose stdin/stdout "
                        "reach the host, e.g. 'node .../bridge.js connect --key KEY'")
    _add_swarm_flags(parser, "reach the host through Hyperswarm by its key (Server ID)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds without a message before giving up (default 30)")
    parser.set_defaults(func=_chat)


def _serve(args: argparse.Namespace) -> int:
    from .server import HostSidecarConfig, run_sidecar

    options = {"model": args.model, "max_clients": args.max_clients,
               "concurrency": args.concurrency, "max_tokens": args.max_tokens,
               **({"host_name": args.host_name} if args.host_name else {})}
    config = sidecar_config(
        HostSidecarConfig, host=args.host, port=None if args.no_tcp else args.port,
        unix_path=args.unix, swarm_key=args.swarm_key, swarm_bootstrap=args.swarm_bootstrap,
        swarm_direct=args.swarm_direct, options=options)
    return serve_sidecar(run_sidecar, settings_from_args(args), config)


def _chat(args: argparse.Namespace) -> int:
    import shlex

    from .client import HostClient
    from .errors import HostError

    if not (args.port or args.unix or args.bridge or args.swarm_key):
        print("host-chat: give --port, --unix, --swarm-key or --bridge", file=sys.stderr)
        return 2

    async def main() -> int:
        try:
            if args.swarm_key:
                from .swarm import connect_command

                command = connect_command(args.swarm_key, bootstrap=args.swarm_bootstrap,
                                          direct=args.swarm_direct, timeout_s=args.timeout)
                client = await HostClient.spawn(command, timeout_s=args.timeout + 5)
            elif args.bridge:
                client = await HostClient.spawn(shlex.split(args.bridge), timeout_s=args.timeout)
            else:
                client = await HostClient.connect(args.host, args.port, unix_path=args.unix,
                                                  timeout_s=args.timeout)
        except HostError as exc:
            print(f"host-chat: {exc.code}: {exc.message}", file=sys.stderr)
            return 1
        async with client:
            prompts = [args.prompt] if args.prompt is not None else \
                (line.rstrip("\n") for line in sys.stdin)
            for prompt in prompts:
                if not prompt.strip():
                    continue
                try:
                    async for piece in client.chat(prompt, timeout_s=args.timeout):
                        sys.stdout.write(piece)
                        sys.stdout.flush()
                except HostError as exc:
                    print(f"\nhost-chat: {exc.code}: {exc.message}", file=sys.stderr)
                    return 1
                sys.stdout.write("\n")
                sys.stdout.flush()
        return 0

    return run_async(main, "WARNING")
