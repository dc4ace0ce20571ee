"""YAML conversations (``playbooks/tests/*.yaml``) run through the real ``openai`` client.

The runner is the one ``voice-server playbook test`` uses (``playbook/scenario.py``); here the
scripted replies come from a scripted OpenAI-compatible HTTP server, so each scenario also
passes through the ``openai`` client and our provider's parsing of the wire format.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.llm import LLMRouter
from voice_server.playbook.scenario import (
    ScenarioError,
    ScriptedReply,
    read_scenario,
    run_scenario,
)

from .conftest import PLAYBOOKS

SCENARIOS = sorted((PLAYBOOKS / "tests").glob("*.yaml"))


class WireScript:
    """The scenario's replies go to the scripted HTTP endpoint."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.fake.requests

    def add(self, replies: list[ScriptedReply]) -> None:
        self.fake.add(*(Reply(text=r.text, tool_calls=list(r.tool_calls), status=r.status,
                              error_message=r.error_message) for r in replies))

    def unused(self) -> int:
        return len(self.fake.script)


def test_scenarios_exist() -> None:
    """At least one scenario per example playbook."""
    covered = {yaml.safe_load(p.read_text())["playbook"] for p in SCENARIOS}
    assert covered >= {"restaurant", "support", "appointments"}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
async def test_scenario(path: Path, fake: FakeOpenAI, router: LLMRouter,
                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every turn of the scenario gives the expected tools, stages, events and reply."""
    monkeypatch.setenv("VOICE_SERVER_DATA_DIR", str(tmp_path))
    assert await run_scenario(path, router, WireScript(fake)) == []


@pytest.mark.parametrize(("text", "problem"), [
    ("playbook: x\n", "a scenario needs `playbook: ID` and a list `turns`"),
    ("playbook: x\nclock: soon\nturns: []\n", "clock 'soon' is not a local time"),
    ("playbook: x\nturns: [{llm: [a]}]\n", "turn 1: each turn needs `user`"),
    ("playbook: x\nturns: [{user: hi, llm: hello}]\n", "turn 1: `llm` must be a list"),
    ("playbook: x\nturns: [{user: hi, after_s: soon}]\n", "`after_s` must be a number"),
    ("playbook: x\nturns: [{user: hi, llm: [{status: bad}]}]\n",
     "turn 1: a scripted reply's status is a number"),
    ("playbook: x\nturns: [{user: hi, llm: [3]}]\n", "a scripted reply is a text or a mapping"),
    ("playbook: x\nturns: [{user: hi, expect: [1]}]\n", "`expect` must be a mapping"),
    ("playbook: x\nturns: [{user: hi, expect: {events: x}}]\n", "`expect.events` must be a list"),
    ("playbook: x\nturns: [{user: hi, expect: {tools: [x]}}]\n", "`expect.tools` holds mappings"),
    ("playbook: x\nturns: [{user: hi, expect: {requests: {first: {}}}}]\n", "request numbers"),
    ("playbook: x\nturns: [{user: hi, expect: {requests: {0: {tool: []}}}}]\n",
     "unknown request keys ['tool']"),
])
def test_a_malformed_scenario_is_named_not_run(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=re.escape(problem)):
        read_scenario(path)


def test_a_difference_names_the_key_that_differs() -> None:
    from voice_server.playbook.scenario import difference

    result = {"booked": False, "offer": {"time": "09:00"}, "free": ["09:00", "09:30"]}
    assert difference({"booked": False}, result, "book") is None  # more keys may be there
    assert difference({"offer": {"time": "11:00"}}, result, "book") == \
        "book.offer.time: wanted '11:00', got '09:00'"
    assert difference({"free": ["09:00", "10:00"]}, result, "book") == \
        "book.free[1]: wanted '10:00', got '09:30'"
    assert difference({"free": ["09:00"]}, result, "book") == \
        "book.free: wanted ['09:00'], got ['09:00', '09:30']"
    assert difference({"id": 1}, result, "book") == \
        "book.id: missing (there: booked, offer, free)"
