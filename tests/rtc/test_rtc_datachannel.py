"""Client messages on the WebRTC data channel go the WebSocket's way (issue 20, item 7): one
rate limit and one idle clock for both."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer

pytestmark = pytest.mark.slow


async def test_data_channel_messages_keep_the_connection_and_are_rate_limited(rtc_llm):
    settings = load_settings(port=0, llm_provider="openai_compat", llm_base_url=rtc_llm.base_url,
                             llm_model="fake-model", ice_host_addresses="127.0.0.1",
                             ice_candidate_allow="127.0.0.1",
                             preload_models=False, idle_timeout_s=scaled(1.5),
                             max_messages_per_s=4, message_burst=6)
    async with VoiceServer(settings) as server, \
            RtcClient(f"ws://127.0.0.1:{server.port}/ws") as client:
        await client.negotiate(with_mic=False)
        # three idle timeouts long, the client speaks only on the data channel
        for i in range(int(3 * 1.5 / 0.5)):
            client.channel.send(json.dumps({"type": "ping", "timestamp": i}))
            await asyncio.sleep(scaled(0.5))
        assert client.ws.close_code is None, "closed as idle although it was talking"
        every = [m for _, m in client.ws_messages] + [m for _, m in client.dc_messages]
        assert any(m["type"] == "pong" for m in every)

        for i in range(30):  # a burst far over 4 a second
            client.channel.send(json.dumps({"type": "ping", "timestamp": 1000 + i}))
        await asyncio.sleep(scaled(1.0))
        every = [m for _, m in client.ws_messages] + [m for _, m in client.dc_messages]
        limited = [m for m in every if m["type"] == "error" and m["code"] == "RATE_LIMITED"]
        answered = {m["timestamp"] for m in every if m["type"] == "pong"}
        assert limited, "the data channel bypassed the rate limit"
        assert len(answered & set(range(1000, 1030))) < 30
