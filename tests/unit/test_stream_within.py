"""llm.stream_within: the router's stream under a whole-answer deadline, always closed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.adapters.fakes import ProgrammableProvider
from voice_server.llm import ChatRequest, LLMRouter, LLMTimeout, stream_within

REQUEST = ChatRequest(messages=[{"role": "user", "content": "one two three"}])


async def test_the_whole_answer_streams_within_its_deadline():
    """Without a hold-up the events are the provider's own."""
    router = LLMRouter({"p": ProgrammableProvider()}, default="p")
    texts = [e.text async for e in stream_within(router, REQUEST, 5.0) if e.text]
    assert "".join(texts) == "echo: one two three"


async def test_a_slow_answer_is_an_llm_timeout_and_the_stream_is_closed():
    """Past the deadline the stream fails with LLMTimeout and the provider's stream ends."""
    provider = ProgrammableProvider()
    provider.chunk_gate = asyncio.Event()  # never set: the second word never comes
    router = LLMRouter({"p": provider}, default="p")
    with pytest.raises(LLMTimeout, match="did not finish in"):
        async for _ in stream_within(router, REQUEST, 0.2):
            pass
    assert provider.cancelled.is_set()


async def test_a_consumer_that_stops_early_closes_the_stream():
    """Leaving after the first event closes the provider's stream at once."""
    provider = ProgrammableProvider()
    router = LLMRouter({"p": provider}, default="p")
    async with contextlib.aclosing(stream_within(router, REQUEST, None)) as events:
        async for _ in events:
            break
    assert provider.cancelled.is_set() and not provider.finished.is_set()


async def test_a_deadline_passing_while_the_consumer_works_is_an_llm_timeout_not_a_cancel():
    """The deadline falls while the consumer is busy between two events (speaking a piece):
    the consumer is not cancelled there; its next pull fails with LLMTimeout. Before, the
    timeout cancelled the consumer's own await, which looked like a barge-in."""
    provider = ProgrammableProvider()
    router = LLMRouter({"p": provider}, default="p")
    pulled = 0
    with pytest.raises(LLMTimeout):
        async with contextlib.aclosing(stream_within(router, REQUEST, 0.1)) as events:
            async for _ in events:
                pulled += 1
                await asyncio.sleep(0.3)  # the consumer's own work outlives the deadline
    assert pulled == 1
    assert asyncio.current_task().cancelling() == 0
    assert provider.cancelled.is_set()
