"""A playbook over the WebSocket voice path: tool and stage events in order (issue 5)."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request

import pytest
import websockets

from tests.integration.conftest import Client, ws_url
from tests.support.fake_openai import Reply

pytestmark = pytest.mark.slow


async def test_playbook_voice_turn_emits_tool_and_stage_events(scripted_server, fake_llm,
                                                               make_speech):
    """Speaking a booking request moves greeting -> booking (keyword), runs the tool, then
    speaks the answer: stage-change, tool-call-start, tool-call-end{durationMs}, llm, tts."""
    fake_llm.add(
        Reply(tool_calls=[{"name": "check_availability",
                           "arguments": {"time": "19:00", "party_size": 2}}]),
        "We have a table for two at seven. May I have your name?")
    url = ws_url(scripted_server) + "?playbook=restaurant"
    async with websockets.connect(url, max_size=None) as ws:
        client = Client(ws)
        ready = await client.recv()
        wav = make_speech("Can I reserve a table for two people, please?")
        await client.send({"type": "audio", "data": base64.b64encode(wav).decode()})
        messages = await client.until("tts-complete", timeout=90)
    kinds = [m["type"] for m in messages]
    heard = messages[0]["text"].lower()
    assert "table" in heard or "reserve" in heard, heard
    stage = next(m for m in messages if m["type"] == "stage-change")
    assert stage == {"type": "stage-change", "from": "greeting", "to": "booking",
                     "reason": "keyword_match"}
    start = next(m for m in messages if m["type"] == "tool-call-start")
    end = next(m for m in messages if m["type"] == "tool-call-end")
    assert start["name"] == "check_availability"
    assert start["arguments"] == {"time": "19:00", "party_size": 2}
    assert end["callId"] == start["callId"] and end["durationMs"] >= 0
    assert end["result"]["available"] is True
    assert kinds.index("stage-change") < kinds.index("tool-call-start") \
        < kinds.index("tool-call-end") < kinds.index("llm") < kinds.index("tts-complete")
    llm = next(m for m in messages if m["type"] == "llm")
    assert llm["text"] == "We have a table for two at seven. May I have your name?"
    session = await scripted_server.sessions.get(ready["id"])
    assert session.meta["playbook"] == "restaurant"
    assert session.state["stage"] == "booking"
    assert [m["role"] for m in session.history] == ["user", "assistant", "tool", "assistant"]


async def test_unknown_playbook_is_reported(scripted_server):
    """An unknown ?playbook= gets PLAYBOOK_ERROR and the connection keeps serving."""
    async with websockets.connect(ws_url(scripted_server) + "?playbook=nope") as ws:
        client = Client(ws)
        assert (await client.recv())["type"] == "ready"
        err = await client.recv()
        assert err["code"] == "PLAYBOOK_ERROR" and "nope" in err["message"]
        await client.send({"type": "ping", "timestamp": 7})
        assert await client.recv() == {"type": "pong", "timestamp": 7}


async def test_playbooks_route_lists_the_bundled_examples(scripted_server):
    """GET /playbooks lists the playbooks for the page's picker."""
    def get() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{scripted_server.port}/playbooks",
                                    timeout=10) as r:
            return json.loads(r.read())

    listing = await asyncio.to_thread(get)
    ids = {p["id"] for p in listing["playbooks"]}
    assert {"restaurant", "support", "appointments"} <= ids
