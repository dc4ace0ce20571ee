"""Tool runners: argument validation, Python handlers, HTTP webhooks with timeout and retries."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from voice_server.playbook import ToolRunner, load_playbook_text

HERE = Path(__file__).parent

TOOLS = textwrap.dedent("""\
    id: tools
    initial_stage: s
    stages: {s: {}}
    tools:
      add:
        parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}},
                     required: [a, b], additionalProperties: false}
        handler: {python: "tool_funcs:add"}
      greet:
        parameters: {type: object, properties: {name: {type: string}}, required: [name]}
        handler: {python: "tool_funcs:greet", options: {greeting: ciao}}
      greet_caller:
        parameters: {type: object, required: [name],
                     properties: {name: {type: string, x-from-caller: true}}}
        handler: {python: "tool_funcs:greet"}
      slow: {handler: {python: "tool_funcs:slow", timeout_s: 0.05}}
      broken: {handler: {python: "tool_funcs:broken"}}
      odd: {handler: {python: "tool_funcs:odd_result"}}
      missing: {handler: {python: "tool_funcs:nothing_here"}}
      lenient:
        parameters: {type: object}
        handler: {python: "tool_funcs:add"}
      hook:
        parameters: {type: object, properties: {q: {type: string}}}
        handler: {http: {url: "URL/hook", timeout_s: 0.5, retries: 2}}
      hook_get:
        parameters: {type: object, properties: {q: {type: string}, n: {type: integer}}}
        handler: {http: {url: "URL/get", method: GET, headers: {X-Key: k1}}}
      hook_slow:
        handler: {http: {url: "URL/slow", timeout_s: 0.1, retries: 1}}
      hook_bad:
        handler: {http: {url: "URL/bad", retries: 3}}
    """)


class Hooks:
    """A webhook server on 127.0.0.1 with scripted statuses."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.bodies: list[Any] = []
        self.release = asyncio.Event()
        self.url = ""

    async def hook(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        status = self.statuses.pop(0) if self.statuses else 200
        if status != 200:
            return web.Response(status=status, text="nope")
        return web.json_response({"echo": self.bodies[-1]["arguments"]})

    async def get(self, request: web.Request) -> web.Response:
        self.bodies.append({"query": dict(request.query), "key": request.headers.get("X-Key")})
        return web.Response(text="plain text answer")

    async def slow(self, request: web.Request) -> web.Response:
        self.bodies.append("slow")
        await self.release.wait()
        return web.json_response({})

    async def bad(self, request: web.Request) -> web.Response:
        self.bodies.append("bad")
        return web.Response(status=404, text="no such hook")


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    state = Hooks()
    app = web.Application()
    app.router.add_post("/hook", state.hook)
    app.router.add_get("/get", state.get)
    app.router.add_post("/slow", state.slow)
    app.router.add_post("/bad", state.bad)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore
    yield state
    state.release.set()
    await runner.cleanup()


@pytest.fixture
async def runner(hooks: Hooks) -> AsyncIterator[ToolRunner]:
    pb = load_playbook_text(TOOLS.replace("URL", hooks.url), base_dir=HERE)
    async with ToolRunner(pb) as tools:
        yield tools


# (description, tool, raw arguments, ok, result or error text)
CASES = [
    ("sync handler runs in a worker thread", "add", '{"a": 2, "b": 3}', True,
     {"sum": 5, "thread": True}),
    ("arguments as a dict", "add", {"a": 1, "b": 1}, True, {"sum": 2, "thread": True}),
    ("async handler with ctx options", "greet", '{"name": "Ada"}', True,
     "ciao Ada from tools/greet"),
    ("invalid JSON", "add", '{"a": 2,', False,
     "arguments are not valid JSON (Expecting property name enclosed in double quotes); call add "
     "again with a JSON object"),
    ("not an object", "add", "[1, 2]", False, "arguments must be a JSON object; call add again"),
    ("schema violations listed", "add", '{"a": "x", "c": 1}', False,
     "invalid arguments for add: 'b' is a required property; Additional properties are not "
     "allowed ('c' was unexpected); a: 'x' is not of type 'integer'. Call add again with "
     "arguments matching its schema"),
    ("unknown tool", "nope", "{}", False,
     "unknown tool 'nope'; available tools: add, broken, greet, greet_caller, hook, hook_bad, "
     "hook_get, hook_slow, lenient, missing, odd, slow"),
    ("timeout", "slow", "{}", False, "tool slow timed out after 0.05 s"),
    ("exception", "broken", "{}", False, "tool broken failed: RuntimeError: database is down"),
    ("handler rejects arguments", "lenient", '{"z": 1}', False, "tool lenient rejected its "
     "arguments: add() got an unexpected keyword argument 'z'"),
    ("non-JSON result rendered", "odd", "{}", True, {"when": "<class 'object'>"}),
    ("handler missing at run time", "missing", "{}", False,
     "tool missing is not available: module 'tool_funcs' has no function 'nothing_here'"),
]


@pytest.mark.parametrize(("name", "raw", "ok", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
async def test_python_tools(runner: ToolRunner, name: str, raw: Any, ok: bool,
                            expected: Any) -> None:
    """Each call ends in an outcome (never an exception) as the table says."""
    outcome = await runner.run(name, raw, call_id="c1")
    assert outcome.ok is ok
    assert (outcome.result if ok else outcome.error) == expected
    assert outcome.duration_ms >= 0 and outcome.call_id == "c1"


async def test_webhook_retries_server_errors(runner: ToolRunner, hooks: Hooks) -> None:
    """5xx answers are retried; the body carries tool, call id, arguments and session data."""
    hooks.statuses = [503, 500]
    outcome = await runner.run("hook", {"q": "hi"}, call_id="c9", data={"stage": "x"})
    assert outcome.ok and outcome.result == {"echo": {"q": "hi"}}
    assert hooks.bodies == [{"tool": "hook", "call_id": "c9", "arguments": {"q": "hi"},
                             "data": {"stage": "x"}}] * 3


async def test_webhook_gives_up(runner: ToolRunner, hooks: Hooks) -> None:
    """After 1 + retries failed attempts the model is told so."""
    hooks.statuses = [500, 500, 500]
    outcome = await runner.run("hook", {}, call_id="c")
    assert outcome.error == "tool hook webhook failed after 3 attempt(s): HTTP 500"
    assert len(hooks.bodies) == 3


async def test_webhook_get_and_text(runner: ToolRunner, hooks: Hooks) -> None:
    """GET sends the arguments as query parameters with the configured headers."""
    outcome = await runner.run("hook_get", {"q": "x y", "n": 2}, call_id="c")
    assert outcome.ok and outcome.result == "plain text answer"
    assert hooks.bodies == [{"query": {"q": "x y", "n": "2"}, "key": "k1"}]


async def test_webhook_timeout(runner: ToolRunner, hooks: Hooks) -> None:
    """A slow webhook times out per attempt, and is retried."""
    outcome = await runner.run("hook_slow", {}, call_id="c")
    assert outcome.error == "tool hook_slow webhook failed after 2 attempt(s): timed out after " \
        "0.1 s"
    assert hooks.bodies == ["slow", "slow"]


async def test_webhook_client_error_not_retried(runner: ToolRunner, hooks: Hooks) -> None:
    """A 4xx answer is final."""
    outcome = await runner.run("hook_bad", {}, call_id="c")
    assert outcome.error == "tool hook_bad webhook answered HTTP 404: no such hook"
    assert hooks.bodies == ["bad"]


async def test_webhook_unreachable() -> None:
    """A closed port is a connection error reported to the model."""
    pb = load_playbook_text(TOOLS.replace("URL", "http://127.0.0.1:9"), base_dir=HERE)
    async with ToolRunner(pb) as tools:
        outcome = await tools.run("hook_bad", {}, call_id="c")
    assert outcome.error == "tool hook_bad webhook failed after 4 attempt(s): " \
        "ClientConnectorError"


def test_specs() -> None:
    """Tool specs are OpenAI function tools."""
    pb = load_playbook_text(TOOLS.replace("URL", "http://127.0.0.1:9"), base_dir=HERE)
    spec = ToolRunner(pb).specs(["add"])
    assert spec == [{"type": "function", "function": {
        "name": "add", "parameters": pb.tools["add"].parameters}}]


async def test_an_argument_the_caller_never_said_is_refused() -> None:
    """``x-from-caller``: a name the model made up comes back as an error telling it to ask;
    the caller's own words pass (any case), and the keyword is not sent to the LLM."""
    pb = load_playbook_text(TOOLS.replace("URL", "http://127.0.0.1:9"), base_dir=HERE)
    said = "I would like a table for two. My name is Anna Smith."
    async with ToolRunner(pb) as tools:
        guessed = await tools.run("greet_caller", {"name": "John Doe"}, call_id="c1", said=said)
        heard = await tools.run("greet_caller", {"name": "anna smith"}, call_id="c2", said=said)
        unchecked = await tools.run("greet_caller", {"name": "John Doe"}, call_id="c3")
        [spec] = tools.specs(["greet_caller"])
    assert not guessed.ok
    assert guessed.error == ("the caller has not said the name ('John Doe' is a guess). Do not "
                             'call greet_caller yet. Say to the caller: "What is your name, '
                             'please?"')
    assert heard.ok and heard.result.startswith("hello anna smith")
    assert unchecked.ok  # no transcript given: nothing to check against
    assert spec["function"]["parameters"]["properties"]["name"] == {"type": "string"}


@pytest.mark.parametrize(("hhmm", "said"), [
    ("21:00", "9 pm"), ("20:30", "8:30 pm"), ("09:00", "9 am"), ("9:05", "9:05 am"),
    ("12:00", "12 pm"), ("12:30", "12:30 pm"), ("00:15", "12:15 am"), ("00:00", "12 am")])
def test_a_tool_s_sentence_says_times_as_people_do(hhmm: str, said: str) -> None:
    from voice_server.playbook import spoken_time

    assert spoken_time(hhmm) == said


def test_a_tool_s_sentence_says_days_as_people_do() -> None:
    from datetime import date

    from voice_server.playbook import spoken_date, spoken_day

    assert spoken_date("2026-12-01") == "Tuesday 1 December"
    assert spoken_date(date(2030, 3, 12)) == "Tuesday 12 March"
    today = date(2026, 12, 1)
    assert spoken_day("2026-12-01", today) == "today"
    assert spoken_day(date(2026, 12, 2), today) == "tomorrow"
    assert spoken_day("2026-12-04", today) == "on Friday 4 December"
    assert spoken_day("2026-12-01", None) == "on Tuesday 1 December"  # today not known


async def test_a_runner_given_an_http_session_leaves_it_open() -> None:
    """The server's webhook session is shared by every playbook version: a runner closing
    its own would cut the others' calls."""
    import aiohttp

    from voice_server.playbook import ToolRunner, load_playbook_text

    playbook = load_playbook_text("id: p\ninitial_stage: a\nstages: {a: {}}\n")
    async with aiohttp.ClientSession() as shared:
        async with ToolRunner(playbook, http=shared):
            pass
        assert not shared.closed
