"""Tool runners: validate the model's arguments, then call a Python function or an HTTP webhook.

Nothing a tool does can crash a turn: bad JSON, arguments that break the tool's JSON Schema,
unknown tools, exceptions, timeouts and HTTP failures all become a ``ToolOutcome`` with ``ok=False``
and an ``error`` text that is fed back to the model, so that it can
correct itself.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from jsonschema import Draft202012Validator

from .errors import PlaybookError, ToolError
from .heard import words_heard
from .schema import HttpSpec, Playbook, PythonHandler, Tool

__all__ = ["FROM_CALLER", "HandlerImportError", "ToolContext", "ToolOutcome", "ToolRunner",
           "answer_of", "offer_of", "public_schema", "resolve_python", "spoken_date", "spoken_day",
           "spoken_time"]

MAX_RESULT_CHARS = 8000


class HandlerImportError(PlaybookError):
    """A ``python:`` handler names a module or function that cannot be found."""


def resolve_python(spec: str, base_dir: Path | None) -> Callable[..., Any]:
    """Find ``module:function``: as a ``.py`` file under ``base_dir`` (or its two parents), else
    on ``sys.path``. The file form lets a playbook folder carry its tools without installing."""
    module_name, _, func_name = spec.partition(":")
    module = None
    rel = Path(*module_name.split(".")).with_suffix(".py")
    bases = [base_dir, *list(base_dir.resolve().parents)[:2]] if base_dir is not None else []
    for base in bases:
        file = Path(base) / rel
        if file.is_file():
            digest = hashlib.sha1(f"{file.resolve()}:{file.stat().st_mtime_ns}".encode())
            name = f"_voice_server_playbook_tools.{module_name}_{digest.hexdigest()[:10]}"
            module = sys.modules.get(name)
            if module is None:
                loader_spec = importlib.util.spec_from_file_location(name, file)
                if loader_spec is None or loader_spec.loader is None:
                    raise HandlerImportError(f"cannot load {file}")
                module = importlib.util.module_from_spec(loader_spec)
                sys.modules[name] = module  # dataclasses in the module look themselves up here
                try:
                    loader_spec.loader.exec_module(module)
                except Exception as exc:
                    sys.modules.pop(name, None)
                    raise HandlerImportError(f"importing {file} failed: "
                                             f"{type(exc).__name__}: {exc}") from exc
            break
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise HandlerImportError(
                f"cannot import module {module_name!r} ({type(exc).__name__}: {exc}); expected "
                f"a file {rel} beside the playbook or an importable module") from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise HandlerImportError(f"module {module_name!r} has no function {func_name!r}")
    return func


@dataclass
class ToolContext:
    """Passed to a Python handler that declares a ``ctx`` parameter."""

    tool: str
    call_id: str
    options: dict[str, Any]
    data: dict[str, Any]  # the session's playbook data (read it; changes are not persisted)
    playbook_id: str


@dataclass
class ToolOutcome:
    name: str
    call_id: str
    arguments: dict[str, Any]
    ok: bool
    result: Any = None
    error: str | None = None
    duration_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def content(self) -> str:
        """The tool message content the model sees."""
        payload = self.result if self.ok else {"error": self.error}
        text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
        return text[:MAX_RESULT_CHARS]


def answer_of(outcome: ToolOutcome, tool: Tool | None) -> str | None:
    """The text a successful call's result gives as the turn's answer (the tool's
    ``answer_from`` key), or None."""
    if tool is None or tool.answer_from is None or not outcome.ok or \
            not isinstance(outcome.result, dict):
        return None
    text = outcome.result.get(tool.answer_from)
    return text.strip() if isinstance(text, str) and text.strip() else None


def offer_of(outcome: ToolOutcome, tool: Tool | None) -> dict[str, Any]:
    """The argument values a call's spoken answer offers (the tool's ``offer_from`` key)."""
    if tool is None or tool.offer_from is None or answer_of(outcome, tool) is None:
        return {}
    offer = outcome.result.get(tool.offer_from)
    return dict(offer) if isinstance(offer, dict) else {}


def spoken_time(hhmm: str) -> str:
    """A 24-hour ``H:MM`` time as a caller should hear it in a tool's ``answer_from`` text:
    '21:00' -> '9 pm', '14:30' -> '2:30 pm', '12:00' -> '12 pm', '00:15' -> '12:15 am'."""
    hours, minutes = (int(part) for part in hhmm.split(":"))
    return f"{hours % 12 or 12}{f':{minutes:02d}' if minutes else ''} " \
        f"{'pm' if hours >= 12 else 'am'}"


def spoken_date(day: str | date) -> str:
    """A day as a caller should hear it in a tool's ``answer_from`` text: '2026-12-01' ->
    'Tuesday 1 December'."""
    when = date.fromisoformat(day) if isinstance(day, str) else day
    return f"{when:%A} {when.day} {when:%B}"


def spoken_day(day: str | date, today: date | None) -> str:
    """When a day is, as a caller should hear it in a sentence: 'today', 'tomorrow' or 'on
    Tuesday 1 December' (always the last when ``today`` is not known)."""
    when = date.fromisoformat(day) if isinstance(day, str) else day
    if today is not None and when == today:
        return "today"
    if today is not None and when == today + timedelta(days=1):
        return "tomorrow"
    return f"on {spoken_date(when)}"


FROM_CALLER = "x-from-caller"  # a parameter keyword: the value must be one the caller said
_WORDS = re.compile(r"[^\W_]+")


def public_schema(schema: Any) -> Any:
    """A JSON Schema without our ``x-`` keywords (an endpoint may refuse unknown ones)."""
    if isinstance(schema, dict):
        return {k: public_schema(v) for k, v in schema.items() if not str(k).startswith("x-")}
    if isinstance(schema, list):
        return [public_schema(v) for v in schema]
    return schema


class ToolRunner:
    """Runs a playbook's tools. ``async with ToolRunner(pb) as runner: await runner.run(...)``.

    ``executor`` runs synchronous Python handlers (default: the loop's executor). ``http``: the
    HTTP session of the webhooks, its owner's to close (the server shares one among every
    playbook version); without it one is created on first use and closed on exit.
    """

    def __init__(self, playbook: Playbook, *, executor: Executor | None = None,
                 http: aiohttp.ClientSession | None = None) -> None:
        self.playbook = playbook
        self._executor = executor
        self._funcs: dict[str, Callable[..., Any]] = {}
        self._validators = {name: Draft202012Validator(tool.parameters)
                            for name, tool in playbook.tools.items()}
        self._http = http
        self._own_http = http is None

    async def __aenter__(self) -> ToolRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._http is not None and self._own_http:
            await self._http.close()
            self._http = None

    def specs(self, names: list[str]) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries for the named tools (our ``x-`` keywords left out)."""
        out = []
        for name in names:
            tool = self.playbook.tools[name]
            fn: dict[str, Any] = {"name": name, "parameters": public_schema(tool.parameters)}
            if tool.description:
                fn["description"] = tool.description
            out.append({"type": "function", "function": fn})
        return out

    def check_arguments(self, name: str, raw: str | dict[str, Any]) -> dict[str, Any]:
        """Parse and validate arguments; raise ``ToolError`` with a message for the model."""
        if isinstance(raw, str):
            try:
                args = json.loads(raw or "{}")
            except json.JSONDecodeError as exc:
                raise ToolError(f"arguments are not valid JSON ({exc.msg}); call {name} again "
                                f"with a JSON object") from None
        else:
            args = raw
        if not isinstance(args, dict):
            raise ToolError(f"arguments must be a JSON object; call {name} again")
        problems = sorted(self._validators[name].iter_errors(args), key=lambda e: list(e.path))
        if problems:
            detail = "; ".join(
                (".".join(str(p) for p in e.path) + ": " if e.path else "") + e.message
                for e in problems[:3])
            raise ToolError(f"invalid arguments for {name}: {detail}. Call {name} again with "
                            f"arguments matching its schema")
        return args

    def check_said(self, name: str, args: dict[str, Any], said: str) -> None:
        """A string argument whose schema says ``x-from-caller: true`` must be in what the
        caller said (every word of it): a model that guesses a name or a time is told to ask.
        """
        heard = words_heard(said)
        props = self.playbook.tools[name].parameters.get("properties") or {}
        for key, schema in props.items():
            value = args.get(key)
            if not (isinstance(schema, dict) and schema.get(FROM_CALLER)) or \
                    not isinstance(value, str | int):
                continue
            if not set(_WORDS.findall(str(value).lower())) <= heard:
                raise ToolError(f"the caller has not said the {key} ({value!r} is a guess). "
                                f"Do not call {name} yet. Say to the caller: \"What is your "
                                f"{key.replace('_', ' ')}, please?\"")

    async def run(self, name: str, raw_arguments: str | dict[str, Any], *, call_id: str,
                  data: dict[str, Any] | None = None, said: str | None = None) -> ToolOutcome:
        """Run one call; never raises except ``CancelledError``. ``said``: what the caller
        said in this conversation, for the ``x-from-caller`` check."""
        started = time.monotonic()
        outcome = ToolOutcome(name=name, call_id=call_id, arguments={}, ok=False)
        try:
            if name not in self.playbook.tools:
                raise ToolError(f"unknown tool {name!r}; available tools: "
                                f"{', '.join(sorted(self.playbook.tools)) or 'none'}")
            outcome.arguments = self.check_arguments(name, raw_arguments)
            if said is not None:
                self.check_said(name, outcome.arguments, said)
            handler = self.playbook.tools[name].handler
            if isinstance(handler, PythonHandler):
                result = await self._run_python(name, handler, outcome.arguments, call_id,
                                                dict(data or {}))
            else:
                result = await self._run_http(name, handler.http, outcome.arguments, call_id,
                                              dict(data or {}))
            outcome.result = json.loads(json.dumps(result, default=str))
            outcome.ok = True
        except ToolError as exc:
            outcome.error = str(exc)
        except HandlerImportError as exc:
            outcome.error = f"tool {name} is not available: {exc}"
        except Exception as exc:  # a handler bug must not end the turn
            outcome.error = f"tool {name} failed: {type(exc).__name__}: {exc}"
        outcome.duration_ms = round((time.monotonic() - started) * 1000, 3)
        return outcome

    def _python_func(self, name: str, handler: PythonHandler) -> Callable[..., Any]:
        func = self._funcs.get(name)
        if func is None:
            func = self._funcs[name] = resolve_python(handler.python, self.playbook.base_dir)
        return func

    async def _run_python(self, name: str, handler: PythonHandler, args: dict[str, Any],
                          call_id: str, data: dict[str, Any]) -> Any:
        func = self._python_func(name, handler)
        kwargs = dict(args)
        if "ctx" in inspect.signature(func).parameters:
            kwargs["ctx"] = ToolContext(tool=name, call_id=call_id, options=handler.options,
                                        data=data, playbook_id=self.playbook.id)
        try:
            async with asyncio.timeout(handler.timeout_s):
                if inspect.iscoroutinefunction(func):
                    return await func(**kwargs)
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._executor,
                                                  functools.partial(func, **kwargs))
        except TimeoutError:
            raise ToolError(f"tool {name} timed out after {handler.timeout_s:g} s") from None
        except TypeError as exc:
            raise ToolError(f"tool {name} rejected its arguments: {exc}") from None

    async def _run_http(self, name: str, spec: HttpSpec, args: dict[str, Any], call_id: str,
                        data: dict[str, Any]) -> Any:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        body = {"tool": name, "call_id": call_id, "arguments": args, "data": data}
        last = "no attempt"
        for attempt in range(spec.retries + 1):
            if attempt:
                await asyncio.sleep(min(0.1 * 2 ** (attempt - 1), 1.0))  # retry backoff
            try:
                async with asyncio.timeout(spec.timeout_s):
                    kw: dict[str, Any] = {"headers": spec.headers}
                    if spec.method == "GET":
                        kw["params"] = {k: v if isinstance(v, str) else json.dumps(v)
                                        for k, v in args.items()}
                    else:
                        kw["json"] = body
                    async with self._http.request(spec.method, spec.url, **kw) as resp:
                        text = await resp.text()
                        if resp.status >= 500:
                            last = f"HTTP {resp.status}"
                            continue
                        if resp.status >= 400:
                            raise ToolError(f"tool {name} webhook answered HTTP {resp.status}: "
                                            f"{text[:200]}")
                        try:
                            return json.loads(text) if text else None
                        except json.JSONDecodeError:
                            return text
            except TimeoutError:
                last = f"timed out after {spec.timeout_s:g} s"
            except aiohttp.ClientError as exc:
                last = f"{type(exc).__name__}"
        raise ToolError(f"tool {name} webhook failed after {spec.retries + 1} attempt(s): {last}")
