"""PlaybookResponder: concurrency of tool calls, barge-in during a tool, errors, state."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.llm import LLMRouter, LLMUnavailable
from voice_server.playbook import PlaybookResponder, load_playbook, load_playbook_text
from voice_server.playbook.responder import FINAL_NUDGE
from voice_server.protocol import Message, StageChange, ToolCallEnd, ToolCallStart

from .conftest import PLAYBOOKS, scaled
from .support import Conversation

HERE = Path(__file__).parent

PLAYBOOK = textwrap.dedent("""\
    id: r
    initial_stage: s
    globals: {system_prompt: Be brief., max_tool_rounds: 2}
    stages:
      s: {tools: [wait, add], turn_taking: {end_silence_ms: 800}}
      t: {system_prompt: Done., turn_taking: {barge_in: false}}
    transitions:
      - {from: s, to: t, when: {tool_result: {tool: wait, ok: true}}}
    tools:
      wait:
        parameters: {type: object, properties: {n: {type: integer}}}
        handler: {http: {url: "URL/wait", timeout_s: 5}}
      add:
        parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}}
        handler: {python: "tool_funcs:add"}
    """)


class Gate:
    """A webhook that answers only when ``expected`` calls are in flight, or when released."""

    def __init__(self) -> None:
        self.expected = 1
        self.arrived = 0
        self.all_in = asyncio.Event()
        self.release = asyncio.Event()
        self.url = ""

    async def wait(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.arrived += 1
        if self.arrived >= self.expected:
            self.all_in.set()
        await self.all_in.wait()
        await self.release.wait()
        return web.json_response({"n": body["arguments"].get("n"), "done": True})


@pytest.fixture
async def gate() -> AsyncIterator[Gate]:
    state = Gate()
    app = web.Application()
    app.router.add_post("/wait", state.wait)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore
    yield state
    state.release.set()
    state.all_in.set()
    await runner.cleanup()


@pytest.fixture
async def responder(gate: Gate, router: LLMRouter) -> AsyncIterator[PlaybookResponder]:
    pb = load_playbook_text(PLAYBOOK.replace("URL", gate.url), base_dir=HERE)
    async with PlaybookResponder(pb, router, timeout_s=scaled(10)) as r:
        yield r


async def test_parallel_tool_calls_run_concurrently(fake: FakeOpenAI, gate: Gate,
                                                    responder: PlaybookResponder) -> None:
    """Two calls of one round are in flight together (the gate opens only for both)."""
    gate.expected = 2
    gate.release.set()
    fake.add(Reply(tool_calls=[{"name": "wait", "arguments": {"n": 1}},
                               {"name": "wait", "arguments": {"n": 2}}]), "Both done.")
    talk = Conversation(responder)
    reply, events, ctx = await asyncio.wait_for(talk.turn("go"), scaled(10))
    assert reply == "Both done."
    types = [e.type for e in events]
    assert types[:2] == ["tool-call-start", "tool-call-start"]
    assert types[2:] == ["tool-call-end", "tool-call-end", "stage-change"]
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert sorted(e.result["n"] for e in ends) == [1, 2]
    # history: assistant tool_calls, then the tool results in call order, ids matching
    call_ids = [c["id"] for c in ctx.pending[0]["tool_calls"]]
    assert [m.get("tool_call_id") for m in ctx.pending[1:]] == call_ids
    assert len(set(call_ids)) == 2
    # the LLM's second request carries both results after the tool_calls message
    second = fake.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool",
                                           "system"]
    # the new stage offers no tool: told to speak, not to write the results out
    assert second[-1]["content"] == FINAL_NUDGE


async def test_barge_in_during_tool_keeps_the_result(fake: FakeOpenAI, gate: Gate,
                                                     responder: PlaybookResponder) -> None:
    """Cancelling the turn while a tool runs waits for it, records its result, emits its end."""
    fake.add(Reply(tool_calls=[{"name": "wait", "arguments": {"n": 7}}]), "unused answer")
    talk = Conversation(responder)
    ctx = talk.context("please wait")
    started = asyncio.Event()

    async def emit(message: Message) -> None:
        talk.events.append(message)
        if isinstance(message, ToolCallStart):
            started.set()

    ctx.emit = emit

    async def consume() -> list[str]:
        return [d async for d in responder.respond(ctx)]

    task = asyncio.create_task(consume(), name="test-turn")
    await asyncio.wait_for(gate.all_in.wait(), scaled(10))
    assert started.is_set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=0.05)
    assert not done, "the turn must not end before the tool call it started"
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, scaled(10))
    assert [m["role"] for m in ctx.pending] == ["assistant", "tool"]
    assert ctx.pending[1]["content"] == '{"n": 7, "done": true}'
    assert [e.type for e in talk.events] == ["tool-call-start", "tool-call-end", "stage-change"]
    assert ctx.state["stage"] == "t"
    assert len(fake.requests) == 1  # no answer was requested after the barge-in
    fake.script.clear()


async def test_llm_error_propagates_after_state_saved(fake: FakeOpenAI,
                                                      responder: PlaybookResponder) -> None:
    """An LLM failure reaches the pipeline as an LLMError; the turn was still counted."""
    fake.add(Reply(status=503))
    talk = Conversation(responder)
    with pytest.raises(LLMUnavailable):
        await talk.turn("hello")
    assert (talk.state["turns"], talk.state["stage"]) == (1, "s")


async def test_state_and_turn_taking_between_turns(fake: FakeOpenAI,
                                                   responder: PlaybookResponder) -> None:
    """State persists in the session dict; turn-taking and barge-in follow the stage."""
    talk = Conversation(responder)
    assert responder.turn_taking(talk.state) == {"end_silence_ms": 800}
    assert responder.interruptible(talk.state)
    fake.add(Reply(tool_calls=[{"name": "add", "arguments": {"a": 1, "b": 2}}]), "Three.")
    reply, _, ctx = await talk.turn("add one and two")
    assert reply == "Three."
    assert ctx.usage is not None and ctx.usage.output_tokens == 1
    assert {k: talk.state[k] for k in ("playbook", "stage", "turns", "stage_turns")} == \
        {"playbook": "r", "stage": "s", "turns": 1, "stage_turns": 1}
    # a reconnect restores the state dict: a new responder continues from it
    again = PlaybookResponder(responder.playbook, responder._router)
    assert again.stage(dict(talk.state)) == "s"


async def test_stage_barge_in_policy(fake: FakeOpenAI, gate: Gate,
                                     responder: PlaybookResponder) -> None:
    """A stage with `barge_in: false` is not interruptible."""
    gate.release.set()
    fake.add(Reply(tool_calls=[{"name": "wait", "arguments": {}}]), "Done.")
    talk = Conversation(responder)
    await asyncio.wait_for(talk.turn("x"), scaled(10))
    assert talk.state["stage"] == "t"
    assert responder.turn_taking(talk.state) == {"barge_in": False}
    assert not responder.interruptible(talk.state)
    changes = [e for e in talk.events if isinstance(e, StageChange)]
    assert [(c.from_, c.to, c.reason) for c in changes] == [("s", "t", "tool_result")]


async def test_spoken_preamble_and_bounded_rounds(fake: FakeOpenAI,
                                                  responder: PlaybookResponder) -> None:
    """Text before a tool call is spoken; after max_tool_rounds the request has no tools."""
    fake.add(Reply(text="Let me check.", tool_calls=[{"name": "add", "arguments": {"a": 1}}]),
             Reply(tool_calls=[{"name": "add", "arguments": {"a": 2, "b": 2}}]),
             "It is four.")
    talk = Conversation(responder)
    reply, _, ctx = await talk.turn("sum?")
    assert reply == "Let me check.It is four."
    assert [bool(r.get("tools")) for r in fake.requests] == [True, True, False]
    assert fake.requests[2]["messages"][-1] == {"role": "system", "content": FINAL_NUDGE}
    # the model sees its own preamble; history keeps it only in the final assistant entry
    assert fake.requests[1]["messages"][2]["content"] == "Let me check."
    assert ctx.pending[0]["content"] == ""
    assert ctx.pending[1]["content"] == \
        '{"error": "tool add rejected its arguments: add() missing 1 required positional ' \
        'argument: \'b\'"}'


async def test_defaults_runaway_calls_and_timeout_due(fake: FakeOpenAI, router: LLMRouter) -> None:
    """Server defaults fill unset LLM options; a flood of calls is capped; timeouts are polled."""
    from voice_server.playbook.responder import MAX_CALLS_PER_ROUND

    from .support import Clock

    pb = load_playbook_text(textwrap.dedent("""\
        id: d
        initial_stage: s
        globals: {llm: {temperature: 0.7}}
        stages:
          s: {tools: [add], timeout_s: 60}
          t: {}
        transitions: [{from: s, to: t, when: {timeout_s: true}}]
        tools: {add: {handler: {python: "tool_funcs:add"}}}
        """), base_dir=HERE)
    clock = Clock()
    async with PlaybookResponder(pb, router, model="fake-model", temperature=0.1,
                                 max_tokens=99, clock=clock) as responder:
        fake.add(Reply(tool_calls=[{"name": "add", "arguments": {"a": i, "b": 0}}
                                   for i in range(40)]), "Lots.")
        talk = Conversation(responder)
        _, events, ctx = await talk.turn("add them all")
        first = fake.requests[0]
        assert (first["model"], first["temperature"], first["max_tokens"]) == \
            ("fake-model", 0.7, 99)
        assert len([e for e in events if isinstance(e, ToolCallStart)]) == MAX_CALLS_PER_ROUND
        assert len(ctx.pending[0]["tool_calls"]) == MAX_CALLS_PER_ROUND
        assert not responder.timeout_due(talk.state)
        clock.now += 60
        assert responder.timeout_due(talk.state)


async def test_a_result_that_says_its_answer_is_spoken_without_the_model(
        fake: FakeOpenAI, router: LLMRouter) -> None:
    """``answer_from``: a successful call's text is the answer, after the transition's say; a
    round where any call gives none (another tool, an empty text, an error) goes back to
    the model."""
    pb = load_playbook_text(textwrap.dedent("""\
        id: a
        initial_stage: s
        stages: {s: {tools: [told, add]}, t: {tools: [told, add, fails]}}
        transitions: [{from: s, to: t, when: {tool_called: told}, say: "Right."}]
        tools:
          told: {handler: {python: "tool_funcs:told"}, answer_from: say}
          add: {handler: {python: "tool_funcs:add"}}
          fails: {handler: {python: "tool_funcs:broken"}, answer_from: say}
        """), base_dir=HERE)
    async with PlaybookResponder(pb, router) as responder:
        talk = Conversation(responder)
        fake.add(Reply(tool_calls=[{"name": "told", "arguments": {"n": 7}}]))
        reply, _, _ = await talk.turn("seven")
        assert reply == "Right. The number is 7." and len(fake.requests) == 1
        assert talk.history[-1] == {"role": "assistant", "content": "Right. The number is 7."}
        for calls in ([{"name": "told", "arguments": {"n": 1}},
                       {"name": "add", "arguments": {"a": 1, "b": 1}}],
                      [{"name": "told", "arguments": {"n": 0}}],
                      [{"name": "fails", "arguments": {}}]):
            fake.requests.clear()
            fake.add(Reply(tool_calls=calls), "From the model.")
            reply, _, _ = await talk.turn("again")
            assert reply == "From the model." and len(fake.requests) == 2, calls


async def test_consumer_closing_early_closes_the_stream(fake: FakeOpenAI,
                                                        responder: PlaybookResponder) -> None:
    """Closing the answer generator after the first delta ends the turn cleanly."""
    fake.add(Reply(text="one two three four", chunk_delay_s=0.01))
    talk = Conversation(responder)
    gen = responder.respond(talk.context("hi"))
    assert await anext(gen) == "one"
    await gen.aclose()
    fake.add("next answer")
    reply, _, _ = await talk.turn("again")
    assert reply == "next answer"


async def test_one_responder_serves_sessions_concurrently(fake: FakeOpenAI, gate: Gate,
                                                          responder: PlaybookResponder) -> None:
    """Two sessions share one responder at the same time; their states stay apart."""
    gate.expected = 2  # both sessions' tool calls must be in flight together
    gate.release.set()
    fake.add(Reply(tool_calls=[{"name": "wait", "arguments": {"n": 1}}]),
             Reply(tool_calls=[{"name": "wait", "arguments": {"n": 2}}]), "A.", "B.")
    one, two = Conversation(responder), Conversation(responder)
    await asyncio.wait_for(asyncio.gather(one.turn("first"), two.turn("second")), scaled(10))
    assert one.state["stage"] == two.state["stage"] == "t"
    assert one.state["turns"] == two.state["turns"] == 1
    results = {e.result["n"] for talk in (one, two) for e in talk.events
               if isinstance(e, ToolCallEnd)}
    assert results == {1, 2}
    assert {len(talk.events) for talk in (one, two)} == {3}


def test_the_date_line_names_today_on_the_server_s_clock() -> None:
    from datetime import datetime

    from voice_server.playbook.requests import today_line

    assert today_line(datetime(2026, 12, 31, 9, 5).timestamp()) == "Today is Thursday 2026-12-31."


async def test_a_question_the_note_cannot_change_is_said_before_the_note(
        fake: FakeOpenAI, router: LLMRouter, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """Entering the appointments' booking stage with no day said: "Which day ...?" comes at
    once and ends the turn; the note (here 2 s late) is left for after it (``ctx.after``),
    and keeps the visit's reason for the booking."""
    monkeypatch.setenv("VOICE_SERVER_DATA_DIR", str(tmp_path))
    pb = load_playbook(PLAYBOOKS / "appointments.yaml")
    fake.add(Reply(text='{"date": null, "time": null, "name": null, "reason": "check-up"}',
                   delay_s=scaled(2)))
    async with PlaybookResponder(pb, router, timeout_s=scaled(10)) as responder:
        talk = Conversation(responder)
        ctx = talk.context("Hi, I'd like to book a check-up.")
        pieces = responder.respond(ctx)
        first = await asyncio.wait_for(anext(pieces), scaled(1))
        assert first.strip() == pb.stages["scheduling"].collect.ask["date"]
        rest = asyncio.wait_for(_rest(pieces), scaled(1))
        assert await rest == []  # the turn is over, the note not yet asked
        assert ctx.state["stage"] == "scheduling" and fake.requests == []
        assert ctx.after is not None
        await ctx.after()  # what the server's Conversation runs after the turn
        assert ctx.state["facts"] == {"reason": "check-up"}
        assert fake.requests[0]["response_format"]["json_schema"]["name"] == "note_facts"


async def _rest(pieces: AsyncIterator[str]) -> list[str]:
    return [p async for p in pieces]
