"""``voice-server prompt run|tools ...`` and ``voice-server sidecar prompt``.

Spec: specs/sidecar-prompt-service.md "CLI Flow" (flags, input loading, text or ``--json``
output, a one-line error and a non-zero exit). Every command takes ``--db DSN_OR_PATH``: a
``postgres://`` DSN or a SQLite file (default: ``prompt-tools.sqlite3`` in the data directory).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...config import config_file_from_env, env_value
from ...serving import os_error_text
from ..kit import (
    add_sidecar_command,
    run_async,
    serve_sidecar,
    settings_from_args,
    sidecar_config,
    validation_text,
)
from .codec import parse_run_request
from .errors import PromptError, ToolNotFound
from .factory import PROVIDERS
from .store import ToolConfig, open_store

__all__ = ["register"]

EXIT_ERROR = 1
EXIT_USAGE = 2


class _CLIError(PromptError):
    """A one-line error for the user, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="DSN_OR_PATH",
                        default=env_value("VOICE_SERVER_PROMPT_DB"),
                        help="tool store: postgres:// DSN or SQLite file (env "
                             "VOICE_SERVER_PROMPT_DB; default: DATA_DIR/prompt-tools.sqlite3)")
    parser.add_argument("--data-dir", metavar="DIR", default=None,
                        help="data directory (env VOICE_SERVER_DATA_DIR; default "
                             "~/.local/share/voice-server)")


def _add_service_flags(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    _add_store_flags(parser)
    parser.add_argument("--secrets-file", metavar="FILE",
                        default=env_value("VOICE_SERVER_PROMPT_SECRETS_FILE"),
                        help="API-key secrets: a JSON object or NAME=VALUE lines, consulted "
                             "before environment variables (default: DATA_DIR/secrets.env)")
    if config:
        parser.add_argument("--config", metavar="FILE",
                            help="voice-server settings file (the local model's options)")


def register(commands: Any, sidecars: Any) -> None:
    """The ``prompt`` command group and ``voice-server sidecar prompt``."""
    _add_sidecar_command(sidecars)
    prompt = commands.add_parser("prompt", help="run prompts through configured tools",
                                   description=__doc__.splitlines()[0].replace("``", ""))
    sub = prompt.add_subparsers(dest="prompt_command", required=True)

    run = sub.add_parser("run", help="run one prompt through a tool and print the answer")
    run.add_argument("--tool-name", required=True, help="the tool configuration to use")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="the prompt text")
    source.add_argument("--input-file", metavar="FILE",
                        help="file holding the prompt (text, or JSON blocks if it parses)")
    run.add_argument("--tools", metavar="FILE.json",
                     help="JSON array of OpenAI-style function tool definitions")
    run.add_argument("--temperature", type=float)
    run.add_argument("--max-output-tokens", type=int)
    run.add_argument("--model", help="override the tool's model")
    run.add_argument("--json", action="store_true", help="print the full response object")
    run.add_argument("--remote", metavar="URL",
                     help="send the request to a running sidecar (its Connect base URL, e.g. "
                          "http://127.0.0.1:53051) instead of calling the model here")
    _add_service_flags(run)
    run.set_defaults(func=_cmd_run)

    tools = sub.add_parser("tools", help="manage tool configurations")
    tsub = tools.add_subparsers(dest="tools_command", required=True)

    def tools_command(name: str, func: Any, help: str) -> argparse.ArgumentParser:
        parser = tsub.add_parser(name, help=help)
        _add_store_flags(parser)
        parser.set_defaults(func=func)
        return parser

    add = tools_command("add", _cmd_tools_add, "add or replace a tool")
    add.add_argument("name")
    add.add_argument("--provider", required=True, choices=PROVIDERS)
    add.add_argument("--model")
    add.add_argument("--base-url")
    add.add_argument("--api-key-secret", metavar="SECRET",
                     help="name of the secret holding the API key")
    add.add_argument("--temperature", type=float)
    add.add_argument("--max-output-tokens", type=int)
    add.add_argument("--system-prompt")
    add.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                     help="extra setting (VALUE parsed as JSON when it can be); repeatable")
    tools_command("list", _cmd_tools_list, "list tools").add_argument("--json", action="store_true")
    tools_command("remove", _cmd_tools_remove, "remove a tool").add_argument("name")


def _add_sidecar_command(sidecar_subparsers: Any) -> None:
    """``voice-server sidecar prompt``: Connect JSON + gRPC-JSON servers."""
    from .server import DEFAULT_GRPC_PORT, DEFAULT_PORT

    parser = add_sidecar_command(
        sidecar_subparsers, "prompt", _serve, port=DEFAULT_PORT, port_help="Connect/HTTP port",
        help="prompt service: Connect JSON and gRPC-JSON prompt.v1.PromptService/Run")
    parser.add_argument("--grpc-port", type=int, default=DEFAULT_GRPC_PORT,
                        help="gRPC-JSON port (-1: no gRPC)")
    _add_service_flags(parser, config=False)  # --config is among the LLM flags


# --- commands ---------------------------------------------------------------------------------

def _command(command: Callable[[argparse.Namespace], Awaitable[int]]
             ) -> Callable[[argparse.Namespace], int]:
    """An async command as the ``func`` argparse calls: a user's error is one stderr line and
    an exit code; logging is set up when the command has ``--log-level``."""
    failures = ((_CLIError, EXIT_ERROR, str),
                (PromptError, EXIT_ERROR, lambda exc: f"{exc.code}: {exc}"),
                (OSError, EXIT_ERROR, os_error_text))
    return lambda args: run_async(lambda: command(args), getattr(args, "log_level", None),
                                  prog="voice-server prompt", interrupted=130, failures=failures)


def _open_service(args: argparse.Namespace) -> Any:
    from ...config import load_settings
    from .service import open_service

    config = args.config or config_file_from_env()
    return open_service(db=args.db, data_dir=args.data_dir, secrets_file=args.secrets_file,
                        settings=load_settings(config) if config else None)


def _read_json_file(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise _CLIError(f"cannot read {what} {path}: {exc.strerror}", EXIT_USAGE) from exc
    except ValueError as exc:
        raise _CLIError(f"{what} {path} is not valid JSON", EXIT_USAGE) from exc


def _build_request(args: argparse.Namespace) -> dict[str, Any]:
    if args.input_file is not None:
        try:
            text = Path(args.input_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise _CLIError(f"cannot read input file {args.input_file}: {exc.strerror}",
                            EXIT_USAGE) from exc
        try:
            value: Any = json.loads(text) if text.lstrip()[:1] == "[" else text
        except ValueError:
            value = text
    else:
        value = args.input
    body: dict[str, Any] = {"tool_name": args.tool_name, "input": value}
    if args.tools:
        tools = _read_json_file(args.tools, "tools file")
        body["tools"] = tools.get("tools") if isinstance(tools, dict) else tools
    for key in ("temperature", "max_output_tokens", "model"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    return body


def _print_response(response: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(response, indent=2, ensure_ascii=False))
        return
    for block in response["output"]:
        if block["type"] == "output_text":
            print(block["text"])
        elif block["type"] == "tool_call":
            call = block["tool_call"]
            print(f"tool_call {call['name']} {json.dumps(call['arguments'], sort_keys=True)}")


@_command
async def _cmd_run(args: argparse.Namespace) -> int:
    body = _build_request(args)
    try:
        request = parse_run_request(body)
    except PromptError as exc:
        raise _CLIError(f"invalid request: {exc}", EXIT_USAGE) from exc
    if args.remote:
        response = await _run_remote(args.remote, body)
        _print_response(response, args.json)
        return 0
    async with _open_service(args) as service:
        try:
            response = await service.run(request)
        except ToolNotFound:
            raise _CLIError(f'tool "{request.tool_name}" not found') from None
    _print_response(response, args.json)
    return 0


async def _run_remote(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One standard Connect unary call (``application/json``) to a running sidecar."""
    import aiohttp

    from .server import RUN_PATH

    url = base_url.rstrip("/") + RUN_PATH
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http, \
                http.post(url, json=body, headers={"Connect-Protocol-Version": "1"}) as resp:
            raw = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise _CLIError(f"cannot reach {base_url}: {type(exc).__name__}") from exc
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if status == 200 and isinstance(data, dict) and "output" in data:
        return data
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        raise _CLIError(f"{data['code']}: {data.get('message', '')}")
    raise _CLIError(f"{base_url} answered HTTP {status}")


def _parse_setting(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise _CLIError(f"--setting needs KEY=VALUE, got {item!r}", EXIT_USAGE)
    try:
        return key.strip(), json.loads(raw)
    except ValueError:
        return key.strip(), raw


@_command
async def _cmd_tools_add(args: argparse.Namespace) -> int:
    settings = dict(_parse_setting(item) for item in args.setting)
    if args.system_prompt:
        settings["system_prompt"] = args.system_prompt
    try:
        config = ToolConfig(name=args.name, provider=args.provider, model=args.model,
                            base_url=args.base_url, api_key_secret=args.api_key_secret,
                            temperature=args.temperature,
                            max_output_tokens=args.max_output_tokens, settings=settings)
    except ValidationError as exc:
        raise _CLIError(f"invalid tool {validation_text(exc)}", EXIT_USAGE) from None
    if config.provider != "local" and not config.model:
        raise _CLIError(f"--model is required for provider {config.provider}", EXIT_USAGE)
    async with open_store(args.db, data_dir=args.data_dir) as store:
        await store.put(config)
    print(f"tool {config.name} saved")
    return 0


@_command
async def _cmd_tools_list(args: argparse.Namespace) -> int:
    async with open_store(args.db, data_dir=args.data_dir) as store:
        tools = await store.list()
    if args.json:
        print(json.dumps([t.model_dump() for t in tools], indent=2, ensure_ascii=False))
        return 0
    rows = [("NAME", "PROVIDER", "MODEL", "BASE URL", "SECRET")] + [
        (t.name, t.provider, t.model or "-", t.base_url or "-", t.api_key_secret or "-")
        for t in tools]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


@_command
async def _cmd_tools_remove(args: argparse.Namespace) -> int:
    async with open_store(args.db, data_dir=args.data_dir) as store:
        if not await store.remove(args.name):
            raise _CLIError(f'tool "{args.name}" not found')
    print(f"tool {args.name} removed")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from .server import PromptSidecarConfig, run_sidecar

    config = sidecar_config(
        PromptSidecarConfig, host=args.host, port=args.port,
        grpc_port=None if args.grpc_port < 0 else args.grpc_port, db=args.db,
        data_dir=args.data_dir, secrets_file=args.secrets_file)
    return serve_sidecar(run_sidecar, settings_from_args(args), config)
