"""A playbook's stage prompts computed ahead (``PlaybookResponder.warm_requests`` through
``LLMRouter.warm``): by the embedded model, which then answers a stage's first turn without
computing its instructions and tools again (tests/unit/test_local_engine.py); never by a remote
endpoint, which is not called."""

from __future__ import annotations

import asyncio

import pytest

from voice_server.llm import LLMRouter
from voice_server.llm.local import LocalLlamaProvider
from voice_server.playbook import PlaybookResponder, load_playbook, load_playbook_text

from .conftest import PLAYBOOKS, scaled
from .support import Conversation


async def test_a_remote_endpoint_is_not_called_ahead(fake, router) -> None:
    async with PlaybookResponder(load_playbook(PLAYBOOKS / "restaurant.yaml"), router) as pb:
        assert [await router.warm(r) for r in pb.warm_requests()] == [False] * 5
        assert fake.requests == []


async def test_the_warm_prompts_start_as_a_turn_s_do(fake, router) -> None:
    """A stage's answer, its intent check and its note of facts: each request computed ahead
    has the instructions and tools of the request a turn in that stage makes."""
    async with PlaybookResponder(load_playbook(PLAYBOOKS / "restaurant.yaml"), router) as pb:
        ahead = pb.warm_requests()
        assert len(ahead) == 5  # greeting's intent and answer; booking's note and answer;
        # confirmation
        await Conversation(pb).turn("Hello, are you open tonight?")  # the greeting stage
        for sent, early in zip(fake.requests, ahead, strict=False):  # intent, then answer
            assert sent["messages"][0] == early.messages[0]
            assert sent.get("tools") == early.tools
        assert ahead[1].messages[-1] == {"role": "user", "content": "Hello."}
        assert ahead[2].response_format is not None  # booking: the note of the caller's facts
        assert [t["function"]["name"] for t in ahead[3].tools or []][-1] == "playbook_transition"
    fake.requests.clear()
    async with PlaybookResponder(load_playbook(PLAYBOOKS / "support.yaml"), router) as pb:
        ahead = pb.warm_requests()
        await Conversation(pb).turn("Hello.")  # triage: intent (none), then answer
        intent, answer = fake.requests[:2]
        assert intent["response_format"]["json_schema"]["name"] == "intent"
        for sent, early in ((intent, ahead[0]), (answer, ahead[1])):
            assert sent["messages"][0] == early.messages[0]
            assert sent.get("tools") == early.tools
            assert sent.get("response_format") == early.response_format
        # 8 stages: an answer each, 3 notes of facts, and 3 intent checks of which advice
        # and bill ask the same: that request is computed once
        assert len(ahead) == 13 and all(r not in ahead[:i] for i, r in enumerate(ahead))


# Three stages with a tool each: the embedded model's tests compute its few short prompts (the
# bundled playbooks' 300-500-token stages cost the suite ~20 s more on the tiny model)
SMALL = """\
id: shop
initial_stage: greet
stages:
  greet: {system_prompt: "Greet the caller of the shop. Be brief.", tools: [lookup]}
  order: {system_prompt: "Take the order.", tools: [lookup]}
  done: {system_prompt: Say goodbye.}
transitions:
  - {from: greet, to: order, when: {keyword: [order]}}
  - {from: order, to: done, when: {tool_called: lookup}}
tools:
  lookup:
    description: Look an order up
    parameters: {type: object, properties: {order: {type: string}}}
    handler: {python: "json:dumps"}
"""


@pytest.mark.slow
async def test_the_embedded_model_computes_every_stage_ahead() -> None:
    provider = LocalLlamaProvider(n_threads=2)
    router = LLMRouter({"local": provider}, default="local")
    try:
        async with PlaybookResponder(load_playbook_text(SMALL), router,
                                     timeout_s=scaled(60)) as pb:
            assert len(pb.warm_requests()) == 3
            assert all([await router.warm(r) for r in pb.warm_requests()])
            reply, _, _ = await Conversation(pb).turn("Hello, are you open tonight?")
            assert reply.strip()
    finally:
        await router.aclose()


async def until(predicate, timeout_s: float) -> None:
    async with asyncio.timeout(scaled(timeout_s)):
        while not predicate():  # noqa: ASYNC110 - polls state no event announces
            await asyncio.sleep(0.01)


@pytest.mark.slow
async def test_a_live_call_stops_the_work_until_it_ends() -> None:
    """server/warm.py: nothing reaches the model while a call is live; a call that starts
    stops the request in progress, and the work goes on when the call ends."""

    from voice_server.server.warm import PromptWarmer

    provider = LocalLlamaProvider(n_threads=2)
    router = LLMRouter({"local": provider}, default="local")
    live = True
    warmer = PromptWarmer(router, lambda: live)
    try:
        async with PlaybookResponder(load_playbook_text(SMALL), router) as pb:
            await provider.load()
            warmer.add(pb)
            await asyncio.sleep(1.0)
            assert warmer.busy and not provider.busy  # waiting for the call to end
            live = False
            await until(lambda: provider.busy, 30)  # a request under way
            live = True
            await asyncio.sleep(0.5)
            assert warmer.busy and not provider.busy  # stopped for the call
            live = False
            await until(lambda: not warmer.busy, 120)
    finally:
        await warmer.aclose()
        await router.aclose()


@pytest.mark.slow
async def test_closing_stops_the_request_under_way() -> None:
    """The server stopping ends the request in progress too (it was left running, and failed
    with "the llm worker is closed" as an unretrieved task exception at shutdown)."""
    import gc

    from voice_server.server.warm import PromptWarmer

    loop = asyncio.get_running_loop()
    unhandled: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    provider = LocalLlamaProvider(n_threads=2)
    router = LLMRouter({"local": provider}, default="local")
    warmer = PromptWarmer(router, lambda: False)
    try:
        async with PlaybookResponder(load_playbook(PLAYBOOKS / "support.yaml"), router) as pb:
            await provider.load()
            warmer.add(pb)
            await until(lambda: provider.busy, 30)
            await warmer.aclose()  # the server's order: the warmer, then the models
            await router.aclose()
            await asyncio.sleep(0.2)
            gc.collect()
            await asyncio.sleep(0)
        assert unhandled == []
    finally:
        loop.set_exception_handler(None)
        await router.aclose()
