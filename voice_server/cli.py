"""A self-hosted real-time voice agent (``serve``), with its LLM sidecars and tools.

``serve`` plus one subcommand group per feature module: each exposes ``register(subparsers)``,
which adds its subcommands and sets ``func`` (a callable taking the parsed
``argparse.Namespace`` and returning an exit code).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from .config import ConfigError
from .settings_flags import add_settings_flags, settings_from_args

__all__ = ["main"]

# Modules that add subcommands; one line each.
_COMMAND_MODULES: list[str] = [
    "voice_server.adapters.cli",  # ``sidecar NAME`` and the sidecars' own commands
    "voice_server.playbook.cli",
    "voice_server.doctor",
]


def _serve(args: argparse.Namespace) -> int:
    from .llm import LLMError
    from .pipeline.stt import STTError
    from .pipeline.tts import TTSError
    from .server.app import run_forever
    from .serving import check_listen, os_error_text

    settings = settings_from_args(args)
    if settings.sidecars:  # a mistake in them is said before the models load, not after
        from .adapters.launch import check_sidecars

        check_sidecars(settings.sidecars, settings)
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        for port in (settings.port, settings.phone_port):  # said before the models load
            check_listen(settings.host, port)
        asyncio.run(run_forever(settings))
    except KeyboardInterrupt:
        pass
    except (LLMError, STTError, TTSError) as exc:  # a model did not load or failed its self-test
        print(f"voice-server: {exc}\nvoice-server: run `voice-server doctor` to check the "
              "install", file=sys.stderr)
        return 1
    except OSError as exc:  # a port we cannot listen on: the user's to fix, no traceback
        if exc.errno not in _LISTEN_HINTS:
            raise
        print(f"voice-server: {os_error_text(exc)}\nvoice-server: {_LISTEN_HINTS[exc.errno]}",
              file=sys.stderr)
        return 1
    return 0


_LISTEN_HINTS = {
    errno.EADDRINUSE: "another program (another voice-server?) listens there: stop it, or "
                      "choose another port with --port",
    errno.EACCES: "ports below 1024 need privileges: choose another with --port",
    errno.EADDRNOTAVAIL: "that address is not one of this machine's: check --host",
}


class _Parser(argparse.ArgumentParser):
    """A usage error is two lines: what is wrong, and where help is (argparse printed the
    whole usage first: ~80 lines of flags for ``serve``). Subcommands inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n{self.prog}: see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="voice-server", description=__doc__.splitlines()[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the voice server (WebSocket + WebRTC + HTTP)",
                           description="Run the voice server. Every option can also come from "
                                       "a config file or a VOICE_SERVER_* variable.")
    add_settings_flags(serve)
    serve.set_defaults(func=_serve)
    for module in _COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"voice-server: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
