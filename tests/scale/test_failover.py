"""Failover after a crash (issue 20, item 6): ``kill -9`` of the instance that owns a
conversation, and the client's reconnect to the other instance continues it within seconds,
not after the dead owner's lease runs out."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time

import pytest
import websockets

from tests.conftest import scaled
from tests.scale.test_shutdown import start_serve

pytestmark = pytest.mark.slow


async def test_sigkill_mid_conversation_then_continue_on_b(pair, redis_proc, scale_llm, connect,
                                                           make_speech, record_property):
    _, b = pair
    proc, port = await start_serve("--session-store", redis_proc.url,
                                   "--llm-provider", "openai_compat",
                                   "--llm-base-url", scale_llm.base_url,
                                   "--llm-model", "fake-model")
    try:
        scale_llm.add("Jupiter is the largest planet.", "It has at least ninety-five moons.")
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
            session_id = json.loads(await ws.recv())["id"]
            wav = make_speech("Which planet is the largest?")
            await ws.send(json.dumps({"type": "audio", "data": base64.b64encode(wav).decode()}))
            async with asyncio.timeout(scaled(90)):
                while json.loads(await ws.recv())["type"] != "tts-complete":
                    pass
            async with asyncio.timeout(scaled(10)):  # the turn reached Redis
                while not ((seen := await b.sessions._load(session_id)) and seen.history):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            proc.send_signal(signal.SIGKILL)  # no drain, no release: the lease stays behind
            killed_at = time.monotonic()
            with pytest.raises(websockets.ConnectionClosed):
                async with asyncio.timeout(scaled(10)):
                    while True:
                        await ws.recv()
        await proc.wait()
        async with connect(b) as on_b:
            await on_b.send({"type": "reconnect", "sessionId": session_id})
            ack = await on_b.recv(timeout=15)
            failover_s = time.monotonic() - killed_at
            record_property("failover_s", round(failover_s, 2))
            assert ack["success"] is True and ack["sessionId"] == session_id, ack
            # the dead owner's lease (15 s) is not waited out: its heartbeat stopped
            assert failover_s < b.settings.session_lease_s
            await on_b.send({"type": "audio", "data": base64.b64encode(
                make_speech("How many moons does it have?")).decode()})
            messages = await on_b.until("llm", timeout=60)
        assert messages[-1]["text"] == "It has at least ninety-five moons."
        sent = scale_llm.requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
        assert sent[2]["content"] == "Jupiter is the largest planet."
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
