"""Scenario tests of a playbook: ``voice-server playbook test SCENARIO...``.

A scenario (YAML, docs/playbooks.md "Scenario tests") is one conversation: per turn, what the
caller says, the language model's replies (one per request the turn makes: a text, tool calls,
or an endpoint's error) and what must follow (tools called, stage changes, events, stage,
reply, session data, what the model was sent). It drives the ``PlaybookResponder`` the voice
server uses, with the playbook's own tool handlers; only the model's words are scripted.
``run_scenario`` returns the failures, one clear line each, and is used both by the command
(over ``ScriptedModel``, in process) and by our test suite (over a scripted HTTP endpoint
through the real ``openai`` client).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from ..llm import LLMError, LLMRouter, StreamEvent, ToolCall, Usage
from ..llm import errors as llm_errors
from ..llm.types import ChatRequest, ChatResult
from ..pipeline.turn import TurnContext
from ..protocol import Message, StageChange, ToolCallEnd, ToolCallStart
from .loader import load_playbook
from .responder import PlaybookResponder
from .schema import Playbook

__all__ = ["ScenarioError", "ScriptedModel", "ScriptedReply", "find_playbook", "read_scenario",
           "run_scenario"]

TURN_KEYS = {"user", "llm", "expect", "after_s"}
EXPECT_KEYS = {"tools", "stage_changes", "events", "stage", "reply", "reply_contains", "data",
               "interruptible", "requests"}
REQUEST_KEYS = {"tools", "tool_choice", "system_contains", "messages",
                "last_tool_content_contains", "json_schema", "context_contains"}
START = 1_000_000.0  # the clock of a scenario without ``clock``


class ScenarioError(Exception):
    """A scenario file that cannot be run (not YAML, unknown keys, no such playbook)."""


@dataclass(frozen=True)
class ScriptedReply:
    """One answer of the model: ``text``, ``tool_calls`` (``[{name, arguments}]``), or an
    endpoint's error (``status`` other than 200, ``error_message``)."""

    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    status: int = 200
    error_message: str = "scripted failure"

    @classmethod
    def of(cls, item: Any) -> ScriptedReply:
        if isinstance(item, str):
            return cls(text=item)
        if not isinstance(item, dict):
            raise ScenarioError(f"a scripted reply is a text or a mapping, not {item!r}")
        calls, status = item.get("tool_calls") or [], item.get("status", 200)
        if not isinstance(status, int) or not isinstance(calls, list) or \
                not all(isinstance(c, dict) for c in calls):
            raise ScenarioError(f"a scripted reply's status is a number and its tool_calls a "
                                f"list of {{name, arguments}}: {item!r}")
        return cls(text=str(item.get("text", "")), tool_calls=tuple(calls), status=status,
                   error_message=str(item.get("error_message", "scripted failure")))


class Script(Protocol):
    """Where a scenario's replies go and what the model was sent (OpenAI request bodies)."""

    requests: list[dict[str, Any]]

    def add(self, replies: list[ScriptedReply]) -> None: ...

    def unused(self) -> int: ...


@dataclass(eq=False)
class ScriptedModel:
    """An ``LLMProvider`` that answers from a script, in process, and a ``Script``."""

    name: str = "scripted"
    default_model: str = "scripted"
    supports_vision: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    _replies: deque[ScriptedReply] = field(default_factory=deque, init=False)

    def add(self, replies: list[ScriptedReply]) -> None:
        self._replies.extend(replies)

    def unused(self) -> int:
        return len(self._replies)

    def _next(self, request: ChatRequest) -> ScriptedReply:
        self.requests.append({k: v for k, v in (
            ("messages", request.messages), ("tools", request.tools),
            ("tool_choice", request.tool_choice),
            ("response_format", request.response_format)) if v is not None})
        reply = self._replies.popleft() if self._replies else ScriptedReply("(unscripted)")
        if reply.status != 200:
            error = llm_errors.LLMBadRequest if 400 <= reply.status < 500 \
                else llm_errors.LLMUnavailable
            raise error(reply.error_message, provider=self.name, status=reply.status)
        return reply

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        result = await self.complete(request)
        if result.text:
            yield StreamEvent(text=result.text)
        yield StreamEvent(done=True, finish_reason=result.finish_reason,
                          tool_calls=tuple(result.tool_calls), usage=result.usage)

    async def complete(self, request: ChatRequest) -> ChatResult:
        reply = self._next(request)
        calls = [ToolCall(id=f"call_{i}", name=str(c.get("name", "")), arguments=(
            a if isinstance(a := c.get("arguments", {}), str) else json.dumps(a)))
            for i, c in enumerate(reply.tool_calls)]
        return ChatResult(text=reply.text, model=request.model or self.default_model,
                          finish_reason="tool_calls" if calls else "stop", tool_calls=calls,
                          usage=Usage(0, len(reply.text.split())))

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        raise llm_errors.LLMBadRequest("a scripted model has no embeddings", provider=self.name)

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        return {"ok": True}

    async def aclose(self) -> None:
        return None


def find_playbook(scenario: Path, playbook_id: str, folder: Path | None = None) -> Path:
    """The playbook file a scenario names by id: ``FOLDER/ID.yaml``, else the ``*.yaml`` there
    whose ``id`` it is; without ``folder``, the scenario's own folder, then its parent's (the
    bundled layout: ``playbooks/tests/x.yaml`` tests ``playbooks/ID.yaml``)."""
    here = scenario.resolve().parent  # "playbook test ." from inside tests/ too
    searched = [folder] if folder else [here, here.parent]
    for where in searched:
        if (where / f"{playbook_id}.yaml").is_file():
            return where / f"{playbook_id}.yaml"
        for path in sorted(where.glob("*.yaml")):
            try:
                if (yaml.safe_load(path.read_text()) or {}).get("id") == playbook_id:
                    return path
            except (yaml.YAMLError, AttributeError, OSError):
                continue
    raise ScenarioError(f"{scenario.name}: no playbook with id {playbook_id!r} in "
                        f"{' or '.join(map(str, searched))} (give --playbooks-dir)")


def read_scenario(path: Path) -> dict[str, Any]:
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path.name}: {exc}") from exc
    if not isinstance(spec, dict) or not isinstance(spec.get("playbook"), str) or \
            not isinstance(spec.get("turns"), list):
        raise ScenarioError(f"{path.name}: a scenario needs `playbook: ID` and a list `turns`")
    if "clock" in spec:
        try:
            datetime.fromisoformat(str(spec["clock"]))
        except ValueError:
            raise ScenarioError(f"{path.name}: clock {spec['clock']!r} is not a local time "
                                "like 2029-12-28T10:00") from None
    for n, turn in enumerate(spec["turns"], 1):
        if problem := _turn_shape(turn):
            raise ScenarioError(f"{path.name} turn {n}: {problem}")
    return spec


def _turn_shape(turn: Any) -> str | None:
    """What is wrong with a turn's shape or keys, if anything."""
    if not isinstance(turn, dict) or "user" not in turn:
        return "each turn needs `user`"
    for key, kind, shape in (("llm", list, "a list"), ("after_s", int | float, "a number"),
                             ("expect", dict, "a mapping")):
        if turn.get(key) is not None and not isinstance(turn[key], kind):
            return f"`{key}` must be {shape}"
    for item in turn.get("llm") or []:
        try:
            ScriptedReply.of(item)
        except ScenarioError as exc:
            return str(exc)
    expect = turn.get("expect") or {}
    for key in ("tools", "stage_changes", "events", "reply_contains"):
        if key in expect and not isinstance(expect[key], list):
            return f"`expect.{key}` must be a list"
    requests = expect.get("requests") or {}
    if not all(isinstance(t, dict) for t in expect.get("tools") or []) or \
            not isinstance(requests, dict) or \
            not all(isinstance(i, int) and isinstance(r, dict) for i, r in requests.items()):
        return ("`expect.tools` holds mappings, and `expect.requests` maps request numbers "
                "(0, 1...) to mappings")
    for what, keys, known in (("turn", set(turn), TURN_KEYS),
                              ("expect", set(expect), EXPECT_KEYS),
                              *(("request", set(r), REQUEST_KEYS) for r in requests.values())):
        if keys - known:
            return f"unknown {what} keys {sorted(keys - known)}; known: {sorted(known)}"
    return None


async def run_scenario(path: Path, router: LLMRouter, script: Script, *,
                       playbooks_dir: Path | None = None) -> list[str]:
    """Run the scenario at ``path`` with ``router`` (whose model answers from ``script``);
    return what failed, "FILE turn N ('words'): what", empty when every turn held."""
    spec = read_scenario(path)
    playbook = load_playbook(find_playbook(path, spec["playbook"], playbooks_dir))
    clock = _Clock(datetime.fromisoformat(str(spec["clock"])).timestamp()
                   if "clock" in spec else START)
    if problem := _unknown_stage(spec["turns"], playbook):
        return [f"{path.name} {problem}"]
    history: list[dict[str, Any]] = []
    state: dict[str, Any] = {}
    failures: list[str] = []
    async with PlaybookResponder(playbook, router, clock=clock) as responder:
        for n, turn in enumerate(spec["turns"], 1):
            clock.now += float(turn.get("after_s", 1))
            replies = [ScriptedReply.of(item) for item in turn.get("llm") or []]
            script.add(replies)
            first = len(script.requests)
            events: list[Message] = []

            async def emit(message: Message, events: list[Message] = events) -> None:
                events.append(message)

            ctx = TurnContext(history=history, emit=emit, state=state,
                              user_message={"role": "user", "content": str(turn["user"])})
            where = f"{path.name} turn {n} ({turn['user']!r})"
            try:
                reply = "".join([d async for d in responder.respond(ctx)]).strip()
                if ctx.after is not None:
                    await ctx.after()
            except LLMError as exc:  # a scripted error the turn does not get over
                failures.append(f"{where}: the turn failed: {exc}")
                break
            history.extend([ctx.user_message, *ctx.pending,
                            *([{"role": "assistant", "content": reply}] if reply else [])])
            seen = _Turn(reply, events, ctx, state, script.requests[first:],
                         responder.interruptible(state))
            failures += [f"{where}: {problem}" for problem in _check(
                turn.get("expect") or {}, seen, len(replies), script.unused())]
            if failures:
                break  # the next turns would fail for this one's sake
    return failures


def _unknown_stage(turns: list[dict[str, Any]], playbook: Playbook) -> str | None:
    """"turn N: no stage ..." for the first stage a turn expects that the playbook lacks."""
    for n, turn in enumerate(turns, 1):
        expect = turn.get("expect") or {}
        named = [expect["stage"]] if "stage" in expect else []
        named += [c.get(k) for c in expect.get("stage_changes") or [] if isinstance(c, dict)
                  for k in ("from", "to")]
        if unknown := [name for name in named if name not in playbook.stages]:
            return (f"turn {n}: no stage {unknown[0]!r} in playbook {playbook.id!r} (its "
                    f"stages: {', '.join(playbook.stages)})")
    return None


@dataclass
class _Clock:
    now: float

    def __call__(self) -> float:
        return self.now


@dataclass
class _Turn:
    reply: str
    events: list[Message]
    ctx: TurnContext
    state: dict[str, Any]
    requests: list[dict[str, Any]]
    interruptible: bool


def _check(expect: dict[str, Any], seen: _Turn, scripted: int, unused: int) -> list[str]:
    if unused or len(seen.requests) != scripted:  # the rest would follow from this
        made = ", ".join(_kind(r) for r in seen.requests)
        return [f"{_count(scripted, 'reply', 'replies')} scripted, but the turn made "
                f"{_count(len(seen.requests), 'request')}{f' ({made})' if made else ''}: "
                "script one reply per request, in that order"]
    out: list[str] = []
    starts = [e for e in seen.events if isinstance(e, ToolCallStart)]
    ends = {e.call_id: e for e in seen.events if isinstance(e, ToolCallEnd)}
    if "tools" in expect:
        out += _check_tools(expect["tools"], starts, ends)
    if "stage_changes" in expect:
        got = [{"from": e.from_, "to": e.to, "reason": e.reason}
               for e in seen.events if isinstance(e, StageChange)]
        _want(out, "stage changes", expect["stage_changes"], got)
    if "events" in expect:
        _want(out, "events", expect["events"], [e.type for e in seen.events])
    if "stage" in expect:
        _want(out, "stage", expect["stage"], seen.state.get("stage"))
    if "reply" in expect:
        _want(out, "reply", expect["reply"], seen.reply)
    out += [f"reply {seen.reply!r} lacks {text!r}"
            for text in expect.get("reply_contains", []) if text not in seen.reply]
    if "data" in expect and (found := difference(expect["data"], seen.state.get("data"),
                                                 "data")):
        out.append(found)
    if "interruptible" in expect:
        _want(out, "interruptible", expect["interruptible"], seen.interruptible)
    for i, want in (expect.get("requests") or {}).items():
        if int(i) >= len(seen.requests):
            out.append(f"request {i}: the turn made {len(seen.requests)} requests")
            continue
        out += [f"request {i}: {p}" for p in _check_request(want, seen.requests[int(i)])]
    recorded = [m["tool_call_id"] for m in seen.ctx.pending if m["role"] == "tool"]
    if recorded != [s.call_id for s in starts] or set(ends) != {s.call_id for s in starts}:
        out.append("a tool's events or its result in the history are missing")
    return out


def _check_tools(wanted: list[dict[str, Any]], starts: list[ToolCallStart],
                 ends: dict[str, ToolCallEnd]) -> list[str]:
    called = [f"{s.name} {s.arguments}" for s in starts]
    if len(starts) != len(wanted):
        return [f"tools: wanted {len(wanted)} calls, got {len(starts)}: {called}"]
    out = []
    for want, start in zip(wanted, starts, strict=True):
        end = ends.get(start.call_id)
        if start.name != want.get("name"):
            out.append(f"tools: wanted {want.get('name')}, got {start.name}")
        elif found := difference(want.get("arguments", {}), start.arguments,
                                 f"{start.name} arguments"):
            out.append(found)
        elif end is None:
            continue
        elif "ok" in want and (end.error is None) != want["ok"]:
            out.append(f"{start.name}: wanted ok {want['ok']}, got "
                       f"{end.error or end.result}")
        elif "result" in want and (found := difference(want["result"], end.result,
                                                       f"{start.name} result")):
            out.append(found)
        elif "error_contains" in want and want["error_contains"] not in (end.error or ""):
            out.append(f"{start.name}: wanted an error with {want['error_contains']!r}, "
                       f"got {end.error!r}")
    return out


def _check_request(want: dict[str, Any], request: dict[str, Any]) -> list[str]:
    out: list[str] = []
    messages = request.get("messages") or []
    if "tools" in want:
        _want(out, "tools", want["tools"],
              [t["function"]["name"] for t in request.get("tools") or []])
    if "tool_choice" in want:
        _want(out, "tool_choice", want["tool_choice"], request.get("tool_choice"))
    if "system_contains" in want and want["system_contains"] not in str(
            messages[0].get("content") if messages else ""):
        out.append(f"the system prompt lacks {want['system_contains']!r}")
    if "context_contains" in want and not any(  # what the session knows, after the history
            want["context_contains"] in str(m.get("content"))
            for m in messages[1:] if m.get("role") == "system"):
        out.append(f"no system line after the history has {want['context_contains']!r}")
    if "json_schema" in want:
        fmt = request.get("response_format") or {}
        _want(out, "json_schema", want["json_schema"], fmt.get("json_schema", {}).get("name"))
    if "messages" in want:
        _want(out, "messages", want["messages"], len(messages))
    if "last_tool_content_contains" in want:
        results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        if not results or want["last_tool_content_contains"] not in results[-1]:
            out.append(f"the last tool result lacks {want['last_tool_content_contains']!r}")
    return out


def _kind(request: dict[str, Any]) -> str:
    """What a request asked for: a structured answer (the note of a collecting stage, the
    intent), a forced tool, or the answer."""
    schema = (request.get("response_format") or {}).get("json_schema") or {}
    forced = request.get("tool_choice")
    if schema.get("name"):
        return str(schema["name"])
    if isinstance(forced, dict):
        return str((forced.get("function") or {}).get("name", "a forced tool"))
    return "answer"


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _want(out: list[str], what: str, wanted: Any, got: Any) -> None:
    if wanted != got:
        out.append(f"{what}: wanted {wanted!r}, got {got!r}")


def difference(expected: Any, actual: Any, where: str) -> str | None:
    """Where ``actual`` differs from ``expected``, or None: a mapping's keys must be there
    with matching values (more keys may be), a list item by item, anything else equal.
    "offer.time: wanted '11:00', got '09:00'"."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, value in expected.items():
            if key not in actual:
                return f"{where}.{key}: missing (there: {', '.join(map(str, actual)) or 'none'})"
            if found := difference(value, actual[key], f"{where}.{key}"):
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list) and \
            len(expected) == len(actual):
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            if found := difference(e, a, f"{where}[{i}]"):
                return found
        return None
    return None if expected == actual else f"{where}: wanted {expected!r}, got {actual!r}"


def scenario_files(given: list[str]) -> list[Path]:
    """The scenario files named, a folder standing for its ``*.yaml``."""
    return [f for g in given for f in (sorted(Path(g).glob("*.yaml")) if Path(g).is_dir()
                                       else [Path(g)])]
