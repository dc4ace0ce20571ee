"""Faults (issue 9): the LLM slow, erroring or down; STT and TTS failing; Redis stopped. The
client gets the spec's code (spec: "Error Codes") and the session answers the next turn."""

from __future__ import annotations

import asyncio
import base64
import contextlib

import pytest

from tests.conftest import scaled
from tests.scale.conftest import free_port
from tests.support.fake_openai import Reply
from voice_server.config import DEFAULT_APOLOGY, load_settings
from voice_server.llm.registry import build_router
from voice_server.pipeline.stt import STTError
from voice_server.pipeline.turn import ChatResponder
from voice_server.workers import WorkerCallFailed

pytestmark = pytest.mark.slow


def audio(wav: bytes) -> dict:
    return {"type": "audio", "data": base64.b64encode(wav).decode()}


async def ask(client, wav: bytes, until: str = "llm") -> list[dict]:
    await client.send(audio(wav))
    return await client.until(until, timeout=60)


async def next_turn_works(client, llm, wav: bytes) -> None:
    llm.add("Recovered.")
    messages = await ask(client, wav, until="tts-complete")
    assert [m for m in messages if m["type"] == "llm"][-1]["text"] == "Recovered."


async def errors_of(client, wav: bytes, *, apology: bool = False) -> list[dict]:
    """Ask; collect messages up to the turn's error. ``apology``: the LLM failed before its
    first word, so the agent then says so (read through its ``tts-complete``)."""
    errors = [m for m in await ask(client, wav, until="error") if m["type"] == "error"]
    if apology:
        said = await client.until("tts-complete", timeout=60)
        assert [m["text"] for m in said if m["type"] == "llm"] == [DEFAULT_APOLOGY]
    return errors


async def test_llm_slow_erroring_down(pair, scale_llm, connect, make_speech):
    _, b = pair  # b: llm_timeout_s=2
    wav = make_speech("Tell me a story.")
    async with connect(b) as client:
        scale_llm.add(Reply(text="Too late.", delay_s=scaled(4)))
        err = (await errors_of(client, wav, apology=True))[-1]
        assert err["code"] == "LLM_TIMEOUT"
        await next_turn_works(client, scale_llm, wav)

        scale_llm.script.clear()
        scale_llm.add(*[Reply(status=500, error_message="upstream exploded")] * 3)
        err = (await errors_of(client, wav, apology=True))[-1]
        assert err["code"] == "LLM_ERROR" and "Traceback" not in err["message"]
        scale_llm.script.clear()
        await next_turn_works(client, scale_llm, wav)

        # down: nothing listens on the endpoint's port
        dead = load_settings(llm_provider="openai_compat", llm_model="m",
                             llm_base_url=f"http://127.0.0.1:{free_port()}/v1")
        router = build_router(dead)
        saved = b.responders.chat
        b.responders.chat = ChatResponder(router, system_prompt="x", model="m", timeout_s=20)
        try:
            err = (await errors_of(client, wav, apology=True))[-1]
            assert err["code"] == "LLM_ERROR"
        finally:
            b.responders.chat = saved
            await router.aclose()
        await next_turn_works(client, scale_llm, wav)


async def test_stt_and_tts_failures(pair, scale_llm, connect, make_speech, monkeypatch):
    _, b = pair
    wav = make_speech("What time is it?")
    async with connect(b) as client:
        async def broken_stt(pcm):
            raise STTError("speech to text failed: injected")

        monkeypatch.setattr(b.stt, "transcribe", broken_stt)
        await client.send(audio(wav))
        err = await client.recv(timeout=30)
        assert err["type"] == "error" and err["code"] == "STT_ERROR"
        monkeypatch.undo()
        await next_turn_works(client, scale_llm, wav)

        async def broken_tts(method, *args):  # Piper raised in the TTS worker process
            raise WorkerCallFailed("RuntimeError", "onnx runtime exploded")

        monkeypatch.setattr(b.tts.worker, "call", broken_tts)
        scale_llm.add("This will not be spoken.")
        err = (await errors_of(client, wav))[-1]
        assert err["code"] == "TTS_ERROR" and "Traceback" not in err["message"]
        monkeypatch.undo()
        await next_turn_works(client, scale_llm, wav)


async def test_redis_down_degrades_and_recovers(pair, redis_proc, scale_llm, connect,
                                                make_speech):
    a, b = pair
    wav = make_speech("Are you there?")
    async with connect(a) as owned, contextlib.AsyncExitStack() as stack:
        owned_id = owned.ready["id"]  # a Redis-backed session owned by A
        await redis_proc.stop()  # no persistence: Redis comes back empty
        try:
            # new sessions while Redis is down live in memory: one stays connected, one leaves
            fresh = await stack.enter_async_context(connect(a))
            async with connect(a) as gone:
                await next_turn_works(gone, scale_llm, wav)
            health = await a.health()
            assert health["status"] == "degraded"
            assert health["stores"]["sessions"]["status"] == "degraded"
            await next_turn_works(fresh, scale_llm, wav)
            await next_turn_works(owned, scale_llm, wav)  # the local copy carries on
            await fresh.send({"type": "reconnect", "sessionId": "unknown-while-down"})
            assert (await fresh.recv())["success"] is False
        finally:
            await redis_proc.start()
        async with asyncio.timeout(scaled(15)):  # the probe notices Redis is back
            while a.sessions.degraded:  # noqa: ASYNC110 - the store has no public event
                await asyncio.sleep(0.05)
        assert (await a.health())["status"] == "ok"
        # every session that lived through the outage was written back: B sees each of them
        for session_id in (owned_id, fresh.ready["id"], gone.ready["id"]):
            async with asyncio.timeout(scaled(10)):
                while (seen := await b.sessions._load(session_id)) is None or not seen.history:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            assert [m["role"] for m in seen.history] == ["user", "assistant"]
        assert fresh.ready["id"] in a.sessions._owned  # still A's: its turns go to Redis
        async with asyncio.timeout(scaled(5)):  # let go once written
            while gone.ready["id"] in a.sessions._owned:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        await next_turn_works(fresh, scale_llm, wav)
        async with asyncio.timeout(scaled(5)):  # its next turn goes straight to Redis
            while (seen := await b.sessions._load(fresh.ready["id"])) is None \
                    or len(seen.history) < 4:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        async with connect(a) as after:  # new sessions go to Redis again
            assert after.ready["id"] in a.sessions._owned


async def test_an_endpoint_that_never_answers_fails_fast_and_the_agent_says_so(
        redis_proc, scale_llm, connect, make_speech):
    """Issue 20, item 12: an endpoint that accepts and never answers left the user in silence
    for the whole LLM timeout (30 s). After the first-token timeout the turn ends with
    LLM_TIMEOUT and a spoken apology; the next turn works."""
    import time

    from tests.scale.conftest import scripted_settings
    from voice_server.server.app import VoiceServer

    settings = scripted_settings(scale_llm, llm_first_token_timeout_s=scaled(1.5),
                                 llm_timeout_s=60)
    wav = make_speech("Tell me a story.")
    async with VoiceServer(settings) as server, connect(server) as client:
        scale_llm.add(Reply(text="Much too late.", delay_s=scaled(20)))
        started = time.monotonic()
        err = (await errors_of(client, wav, apology=True))[-1]
        assert err["code"] == "LLM_TIMEOUT" and "sent nothing for" in err["message"]
        assert time.monotonic() - started < scaled(15)
        await next_turn_works(client, scale_llm, wav)
