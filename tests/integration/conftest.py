"""Servers for integration tests: in-process, real models, free loopback ports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import websockets

from tests.conftest import scaled
from tests.support.fake_openai import FakeOpenAI
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer


@pytest_asyncio.fixture(scope="session")
async def local_server() -> AsyncIterator[VoiceServer]:
    """Real STT, TTS and the embedded local LLM (greedy decoding: the 135M model's answers
    are deterministic then, so assertions on them are not flaky). History is sent up to 6,000
    characters (16,000 by default): the long-conversation test's ~4,000-token history took the
    tiny model 25-31 s to read on a 2.1 GHz Intel Xeon, close to the 30 s an answer may take
    (llm_timeout_s), and once over it."""
    settings = load_settings(port=0, llm_max_tokens=60, llm_temperature=0.0,
                             max_history_chars=6_000)
    async with VoiceServer(settings) as server:
        yield server


@pytest_asyncio.fixture(scope="session")
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_script(request: pytest.FixtureRequest) -> None:
    """A test that uses the scripted LLM starts with an empty script: a reply an earlier test
    queued and never asked for (its turn took another path, or failed) answered the next
    test's first request (a booking's second note came first, and nothing was booked). And on
    the shared scripted server, it starts once every earlier test's session has ended, so
    that no turn of theirs still in flight asks for a reply this test queues."""
    if "scripted_server" in request.fixturenames:
        request.getfixturevalue("_scripted_server_quiet")
    if "fake_llm" in request.fixturenames:
        request.getfixturevalue("fake_llm").reset()


@pytest_asyncio.fixture
async def _scripted_server_quiet(scripted_server: VoiceServer) -> None:
    async with asyncio.timeout(scaled(30)):
        while scripted_server.live:  # noqa: ASYNC110 - polls state no event announces
            await asyncio.sleep(0.02)


@pytest_asyncio.fixture(scope="session")
async def scripted_server(fake_llm: FakeOpenAI) -> AsyncIterator[VoiceServer]:
    """Real STT and TTS; the LLM is a scripted OpenAI-compatible server (deterministic)."""
    settings = load_settings(port=0, llm_provider="openai_compat", llm_base_url=fake_llm.base_url,
                             llm_model="fake-model")
    async with VoiceServer(settings) as server:
        yield server


class Client:
    """A test WebSocket client that reads server messages as dicts."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws

    async def send(self, payload: dict[str, Any] | str | bytes) -> None:
        await self.ws.send(payload if isinstance(payload, str | bytes) else json.dumps(payload))

    async def recv(self, timeout: float = 10) -> dict[str, Any]:  # noqa: ASYNC109
        raw = await asyncio.wait_for(self.ws.recv(), scaled(timeout))
        return json.loads(raw)

    async def until(self, kind: str, timeout: float = 60) -> list[dict[str, Any]]:  # noqa: ASYNC109
        """Receive messages up to and including the first of type ``kind``."""
        seen = []
        async with asyncio.timeout(scaled(timeout)):
            while True:
                msg = json.loads(await self.ws.recv())
                seen.append(msg)
                if msg["type"] == kind:
                    return seen


def ws_url(server: VoiceServer) -> str:
    return f"ws://127.0.0.1:{server.port}/ws"


@pytest.fixture
def connect():
    """``async with connect(server) as client`` -> Client after reading ``ready``."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def _connect(server: VoiceServer, **kw: Any):
        async with websockets.connect(ws_url(server), max_size=None, **kw) as ws:
            client = Client(ws)
            client.ready = await client.recv()
            yield client

    return _connect
