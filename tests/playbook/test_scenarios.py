"""YAML conversations (``playbooks/tests/*.yaml``) run through the real ``openai`` client.

The runner is the one ``voice-server playbook test`` uses (``playbook/scenario.py``); here the
scripted replies come from a scripted OpenAI-compatible HTTP server, so each scenario also
passes through the ``openai`` client and our provider's parsing of the wire format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.llm import LLMRouter
from voice_server.playbook.scenario import ScriptedReply, run_scenario

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
