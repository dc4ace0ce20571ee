"""Tool calls streamed by OpenAI-compatible servers, each as it sends them, through the real
``openai`` client and ``OpenAICompatProvider``."""

from __future__ import annotations

import pytest

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.llm import ChatRequest, LLMRouter


@pytest.mark.parametrize("name_in_each_chunk", [False, True])
async def test_a_call_streamed_in_chunks_has_its_name_once(fake: FakeOpenAI, router: LLMRouter,
                                                           name_in_each_chunk: bool) -> None:
    """OpenAI sends a call's name in its first chunk; llama-cpp-python's server sends it with
    every chunk, and joining them gave 'find_appointmentsfind_appointments...' (a newcomer's
    trial: 'error: unknown tool')."""
    fake.add(Reply(tool_calls=[{"name": "find_appointments", "arguments": {"name": "Tom Becker"}},
                               {"name": "book", "arguments": {"day": "monday"}}],
                   call_chunks=4, name_in_each_chunk=name_in_each_chunk))
    events = [e async for e in router.stream(ChatRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
               for n in ("find_appointments", "book")]))]
    calls = events[-1].tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("find_appointments", '{"name": "Tom Becker"}'), ("book", '{"day": "monday"}')]
