"""``voice-server playbook validate FILE...``, ``playbook chat FILE``, ``playbook test
SCENARIO...`` (``scenario.py``) and ``playbook schema``.

``chat`` drives the same ``PlaybookResponder`` the voice pipeline uses, over the configured LLM
(the language model's settings as flags, e.g. ``--llm-provider openai_compat --llm-base-url
URL``; every ``serve`` setting from ``--config`` or the environment),
printing the tool and stage events (spec: "Playbook Mode Events") as they happen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sized
from pathlib import Path
from typing import Any, TextIO

from ..config import data_dir_set
from ..llm import LLMError, LLMRouter
from ..pipeline.turn import DEFAULT_WINDOW, HistoryWindow, TurnContext
from ..protocol import Message, StageChange, ToolCallEnd, ToolCallStart
from ..settings_flags import add_settings_flags, settings_from_args
from ..settings_groups import ModelSettings
from .errors import Issue, PlaybookLoadError
from .lint import lint
from .loader import load_playbook
from .registry import playbook_files
from .responder import PlaybookResponder
from .scenario import ScenarioError, ScriptedModel, run_scenario, scenario_files
from .schema import Playbook, playbook_json_schema

__all__ = ["register", "run_chat"]


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser("playbook", help="check, try out and describe playbooks")
    sub = group.add_subparsers(dest="playbook_command", required=True)
    validate = sub.add_parser("validate", help="check playbook files (exit 1 on any error)")
    validate.add_argument("files", nargs="+", metavar="FILE",
                          help="a playbook file, or a folder of them (its *.yaml and *.yml, as "
                               "served)")
    validate.add_argument("--no-import", action="store_true",
                          help="do not import the Python tool handlers")
    validate.add_argument("--strict", action="store_true",
                          help="fail on warnings too (unreachable stages, unused tools...)")
    validate.set_defaults(func=_validate)
    chat = sub.add_parser("chat", help="type to a playbook agent in the terminal")
    chat.add_argument("file", metavar="FILE")
    add_settings_flags(chat, [*ModelSettings.model_fields, "log_level"])  # no server flags
    chat.set_defaults(func=_chat)
    test = sub.add_parser("test", help="run scenario tests: conversations with the model's "
                          "replies scripted (exit 1 on any failure)")
    test.add_argument("files", nargs="+", metavar="SCENARIO",
                      help="a scenario file, or a folder of them (its *.yaml)")
    test.add_argument("--playbooks-dir", type=Path, metavar="DIR",
                      help="where the playbooks the scenarios name are (default: the "
                           "scenario's folder, then the folder above it)")
    test.set_defaults(func=_test)
    schema = sub.add_parser("schema", help="print the playbook JSON Schema")
    schema.set_defaults(func=_schema)


def _validate(args: argparse.Namespace) -> int:
    failed = 0
    owners: dict[tuple[Path, str], str] = {}  # (folder, id) -> file: ids are unique in a folder
    files = [str(f) for given in args.files for f in (
        playbook_files(Path(given)) if Path(given).is_dir() else [given])]
    if not files:
        print(f"no playbook files (*.yaml, *.yml) in {', '.join(args.files)}", file=sys.stderr)
        return 1
    for file in files:
        try:
            pb = load_playbook(file, check_handlers=not args.no_import)
            owner = owners.setdefault((Path(file).resolve().parent, pb.id), file)
            if owner != file:
                raise PlaybookLoadError([Issue(file, 1, 1, "id", f"playbook id {pb.id!r} is "
                                               f"already used by {Path(owner).name}")])
        except PlaybookLoadError as exc:
            failed += 1
            print(f"{file}: invalid ({len(exc.issues)} problem"
                  f"{'s' if len(exc.issues) != 1 else ''})", file=sys.stderr)
            for issue in exc.issues:
                print(f"  {issue}", file=sys.stderr)
            continue
        warnings = lint(pb)
        verdict = "fails --strict" if warnings and args.strict else "ok"
        print(f"{file}: {verdict} (id {pb.id}; {_count(pb.stages, 'stage')}, "
              f"{_count(pb.transitions, 'transition')}, {_count(pb.tools, 'tool')})")
        for warning in warnings:
            print(f"  warning: {warning}")
        if warnings and args.strict:
            failed += 1
    return 1 if failed else 0


def _test(args: argparse.Namespace) -> int:
    files = scenario_files(args.files)
    if not files:
        print(f"no scenario files (*.yaml) in {', '.join(args.files)}", file=sys.stderr)
        return 1
    logging.getLogger("voice_server").setLevel(logging.ERROR)  # a scripted failure is no news
    failed = 0
    for path in files:
        try:
            problems = asyncio.run(_run_scenario(path, args.playbooks_dir))
        except (ScenarioError, PlaybookLoadError) as exc:
            problems = [str(exc)]
        failed += bool(problems)
        print(f"{path}: {'FAILED' if problems else 'ok'}")
        for problem in problems:
            print(f"  {problem}")
    print(f"{len(files) - failed} of {_count(files, 'scenario')} passed")
    return 1 if failed else 0


async def _run_scenario(path: Path, playbooks_dir: Path | None) -> list[str]:
    """One scenario over a scripted model, its tool handlers keeping files in a fresh folder."""
    model = ScriptedModel()
    router = LLMRouter({model.name: model}, default=model.name)
    try:
        with tempfile.TemporaryDirectory() as data, data_dir_set(Path(data)):
            return await run_scenario(path, router, model, playbooks_dir=playbooks_dir)
    finally:
        await router.aclose()


def _count(items: Sized, what: str) -> str:
    return f"{len(items)} {what}{'' if len(items) == 1 else 's'}"


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(playbook_json_schema(), indent=2, sort_keys=True))
    return 0


def _chat(args: argparse.Namespace) -> int:
    from ..llm.registry import build_router

    try:
        playbook = load_playbook(args.file)
    except PlaybookLoadError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    settings = settings_from_args(args)

    async def main() -> int:
        router = build_router(settings)
        try:
            return await run_chat(playbook, router, _stdin_lines(), sys.stdout,
                                  window=HistoryWindow.from_settings(settings),
                                  timeout_s=settings.llm_timeout_s,
                                  echo=not sys.stdin.isatty(),  # piped lines are shown
                                  model=settings.llm_model,  # the answers as serve asks them
                                  temperature=settings.llm_temperature,
                                  max_tokens=settings.llm_max_tokens)
        finally:
            await router.aclose()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130
    except LLMError as exc:
        print(f"LLM error: {exc}", file=sys.stderr)
        return 1


async def _stdin_lines() -> AsyncIterator[str]:
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        yield line.rstrip("\n")


def describe(message: Message) -> str:
    """One line per playbook event, for the terminal."""
    if isinstance(message, ToolCallStart):
        return f"[tool-call-start] {message.name} {json.dumps(message.arguments)}"
    if isinstance(message, ToolCallEnd):
        what = f"error: {message.error}" if message.error else json.dumps(message.result)
        return f"[tool-call-end] {message.duration_ms:.0f} ms {what}"
    if isinstance(message, StageChange):
        return f"[stage-change] {message.from_} -> {message.to} ({message.reason})"
    return f"[{message.type}]"


async def run_chat(playbook: Playbook, router: LLMRouter, lines: AsyncIterator[str],
                   out: TextIO, *, window: HistoryWindow = DEFAULT_WINDOW,
                   timeout_s: float | None = 30.0,
                   clock: Callable[[], float] | None = None, echo: bool = False,
                   **answers: Any) -> int:
    """The chat loop: one turn per input line (written as ``you> ...`` when ``echo``: lines
    that came from a pipe); ``/quit`` or end of input stops it. Returns 1 when a turn's LLM
    request failed, else 0. ``answers``: the responder's ``model``, ``temperature`` and
    ``max_tokens``."""
    history: list[dict[str, Any]] = []
    state: dict[str, Any] = {}
    failed = False  # a turn's LLM error: the chat goes on, and exits 1 (a script can tell)
    kw = {"clock": clock} if clock else {}
    async with PlaybookResponder(playbook, router, history=window, timeout_s=timeout_s,
                                 **kw, **answers) as responder:
        out.write(f"playbook {playbook.id}: stage {responder.stage(state)}. "
                  f"Type a message (/quit to stop).\n")
        if playbook.greeting:  # said first, as when a phone call connects
            out.write(f"agent> {playbook.greeting}\n")
            history.append({"role": "assistant", "content": playbook.greeting})
        out.flush()
        async for line in lines:
            text = line.strip()
            if text in ("/quit", "/exit"):
                break
            if not text:
                continue
            if echo:
                out.write(f"you> {text}\n")
            at_line_start = True

            async def emit(message: Message) -> None:
                nonlocal at_line_start
                out.write(("" if at_line_start else "\n") + describe(message) + "\n")
                at_line_start = True
                out.flush()

            ctx = TurnContext(history=history, user_message={"role": "user", "content": text},
                              emit=emit, state=state)
            parts: list[str] = []
            try:
                async for delta in responder.respond(ctx):
                    if at_line_start:
                        out.write("agent> ")
                        at_line_start = False
                    parts.append(delta)
                    out.write(delta)
                    out.flush()
            except LLMError as exc:
                out.write(f"\n[error] {exc}\n")
                failed = True
            if not at_line_start:
                out.write("\n")
            if ctx.after is not None:  # the note a question did not wait for
                await ctx.after()
            answer = "".join(parts).strip()
            history.extend([ctx.user_message, *ctx.pending,
                            *([{"role": "assistant", "content": answer}] if answer else [])])
            out.write(f"(stage: {state.get('stage')})\n")
            out.flush()
    return 1 if failed else 0

