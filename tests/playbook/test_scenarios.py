"""YAML conversations (``playbooks/tests/*.yaml``) run through the real ``openai`` client.

Each turn scripts the LLM's replies (one per request: text, or tool calls) on a scripted
OpenAI-compatible HTTP server, then checks the tools called (name, arguments, outcome), the
stage changes, the event order, the reply text, the session data and what the LLM was sent.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.llm import LLMRouter
from voice_server.playbook import PlaybookResponder, load_playbook
from voice_server.protocol import StageChange, ToolCallEnd, ToolCallStart

from .conftest import PLAYBOOKS
from .support import Clock, Conversation

SCENARIOS = sorted((PLAYBOOKS / "tests").glob("*.yaml"))
TURN_KEYS = {"user", "llm", "expect", "after_s"}
EXPECT_KEYS = {"tools", "stage_changes", "events", "stage", "reply", "reply_contains", "data",
               "interruptible", "requests"}
REQUEST_KEYS = {"tools", "tool_choice", "system_contains", "messages",
                "last_tool_content_contains", "json_schema", "context_contains"}


def _subset(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and _subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            _subset(e, a) for e, a in zip(expected, actual, strict=True))
    return expected == actual


def _reply(item: Any) -> Reply:
    if isinstance(item, str):
        return Reply(text=item)
    return Reply(text=item.get("text", ""), tool_calls=item.get("tool_calls", []),
                 status=item.get("status", 200),
                 error_message=item.get("error_message", "scripted failure"))


def _read(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_scenarios_exist() -> None:
    """At least one scenario per example playbook."""
    covered = {yaml.safe_load(p.read_text())["playbook"] for p in SCENARIOS}
    assert covered >= {"restaurant", "support", "appointments"}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
async def test_scenario(path: Path, fake: FakeOpenAI, router: LLMRouter,
                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every turn of the scenario gives the expected tools, stages, events and reply."""
    monkeypatch.setenv("VOICE_SERVER_DATA_DIR", str(tmp_path))
    spec = _read(path)
    playbook = load_playbook(PLAYBOOKS / f"{spec['playbook']}.yaml")
    # ``clock``: the server's local time when the scenario starts (days a caller names)
    clock = Clock(datetime.fromisoformat(spec["clock"]).timestamp()) if "clock" in spec \
        else Clock()
    async with PlaybookResponder(playbook, router, clock=clock) as responder:
        talk = Conversation(responder)
        for n, turn in enumerate(spec["turns"], 1):
            where = f"{path.name} turn {n} ({turn['user']!r})"
            clock.now += turn.get("after_s", 1)
            fake.add(*(_reply(item) for item in turn.get("llm", [])))
            first_request = len(fake.requests)
            reply, events, ctx = await talk.turn(turn["user"])
            requests = fake.requests[first_request:]
            expect = turn.get("expect", {})
            assert set(turn) <= TURN_KEYS, f"{where}: unknown keys {set(turn) - TURN_KEYS}"
            assert set(expect) <= EXPECT_KEYS, f"{where}: unknown {set(expect) - EXPECT_KEYS}"
            for want in (expect.get("requests") or {}).values():
                assert set(want) <= REQUEST_KEYS, f"{where}: unknown {set(want) - REQUEST_KEYS}"
            assert not fake.script, f"{where}: {len(fake.script)} scripted replies unused"
            assert len(requests) == len(turn.get("llm", [])), where
            starts = [e for e in events if isinstance(e, ToolCallStart)]
            ends = {e.call_id: e for e in events if isinstance(e, ToolCallEnd)}
            assert set(ends) == {s.call_id for s in starts}, f"{where}: unmatched tool events"
            if "tools" in expect:
                assert len(starts) == len(expect["tools"]), f"{where}: tools {starts}"
                for want, start in zip(expect["tools"], starts, strict=True):
                    end = ends[start.call_id]
                    assert start.name == want["name"], where
                    assert _subset(want.get("arguments", {}), start.arguments), where
                    assert end.duration_ms >= 0
                    if "ok" in want:
                        assert (end.error is None) == want["ok"], f"{where}: {end}"
                    if "result" in want:
                        assert _subset(want["result"], end.result), f"{where}: {end.result}"
                    if "error_contains" in want:
                        assert want["error_contains"] in (end.error or ""), f"{where}: {end}"
            if "stage_changes" in expect:
                got = [{"from": e.from_, "to": e.to, "reason": e.reason}
                       for e in events if isinstance(e, StageChange)]
                assert got == expect["stage_changes"], where
            if "events" in expect:
                assert [e.type for e in events] == expect["events"], where
            if "stage" in expect:
                assert talk.state["stage"] == expect["stage"], where
            if "reply" in expect:
                assert reply == expect["reply"], where
            for text in expect.get("reply_contains", []):
                assert text in reply, f"{where}: {reply!r}"
            if "data" in expect:
                assert _subset(expect["data"], talk.state["data"]), f"{where}: {talk.state}"
            if "interruptible" in expect:
                assert responder.interruptible(talk.state) == expect["interruptible"], where
            for i, want in (expect.get("requests") or {}).items():
                request = requests[int(i)]
                if "tools" in want:
                    assert _tool_names(request) == want["tools"], f"{where}: request {i}"
                if "tool_choice" in want:
                    assert request.get("tool_choice") == want["tool_choice"], where
                if "system_contains" in want:
                    assert want["system_contains"] in request["messages"][0]["content"], where
                if "context_contains" in want:  # what the session knows, after the history
                    later = [m["content"] for m in request["messages"][1:]
                             if m["role"] == "system"]
                    assert any(want["context_contains"] in c for c in later), f"{where}: {later}"
                if "json_schema" in want:  # a structured-output answer, by schema name
                    fmt = request.get("response_format") or {}
                    assert fmt.get("json_schema", {}).get("name") == want["json_schema"], where
                if "messages" in want:
                    assert len(request["messages"]) == want["messages"], \
                        f"{where}: {request['messages']}"
                if "last_tool_content_contains" in want:
                    tool_msgs = [m for m in request["messages"] if m["role"] == "tool"]
                    assert want["last_tool_content_contains"] in tool_msgs[-1]["content"], where
            recorded = [m["tool_call_id"] for m in ctx.pending if m["role"] == "tool"]
            assert recorded == [s.call_id for s in starts], f"{where}: history misses a result"
