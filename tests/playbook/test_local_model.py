"""The embedded 135M model drives a playbook: weak tool use must still end every turn cleanly."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from voice_server.llm import LLMRouter
from voice_server.llm.local import LocalLlamaProvider
from voice_server.playbook import PlaybookResponder, load_playbook_text
from voice_server.protocol import ToolCallEnd, ToolCallStart

from .conftest import PLAYBOOKS, scaled
from .support import Conversation

PLAYBOOK = textwrap.dedent("""\
    id: local
    initial_stage: lookup
    globals: {system_prompt: You are a restaurant host. Answer in one short sentence.,
              max_tool_rounds: 2, llm: {max_tokens: 48, temperature: 0}}
    stages:
      lookup:
        system_prompt: Check availability for the caller.
        tools: [check_availability]
        tool_choice: {name: check_availability}
      chat:
        system_prompt: Answer the caller.
    transitions:
      - {from: lookup, to: chat, when: {tool_called: check_availability}}
    tools:
      check_availability:
        parameters:
          type: object
          properties: {time: {type: string}, party_size: {type: integer}}
          required: [time, party_size]
        handler: {python: "tools.restaurant:check_availability"}
    """)


@pytest.mark.slow
async def test_small_local_model_forced_tool() -> None:
    """A forced tool is called (valid, or answered with a validation error), the stage moves on
    and the new stage answers; nothing escapes. (Weak `auto` tool use: test_scenarios.)"""
    provider = LocalLlamaProvider(n_threads=2)
    router = LLMRouter({"local": provider}, default="local")
    pb = load_playbook_text(PLAYBOOK, base_dir=PLAYBOOKS)
    try:
        async with PlaybookResponder(pb, router, timeout_s=scaled(60)) as responder:
            talk = Conversation(responder)
            reply, events, _ = await asyncio.wait_for(
                talk.turn("Do you have a table for 2 people at 19:00?"), scaled(120))
            starts = [e for e in events if isinstance(e, ToolCallStart)]
            ends = [e for e in events if isinstance(e, ToolCallEnd)]
            assert starts and starts[0].name == "check_availability"
            assert len(ends) == len(starts)
            first = ends[0]
            assert first.result is not None or "invalid arguments" in (first.error or "")
            assert talk.state["stage"] == "chat"
            assert isinstance(reply, str)
            assert len(starts) == 1  # the new stage has no tools: it answered directly
    finally:
        await router.aclose()


def test_playbook_dir() -> None:
    """The example tool module the local test relies on is where the loader looks."""
    assert (Path(PLAYBOOKS) / "tools" / "restaurant.py").is_file()
