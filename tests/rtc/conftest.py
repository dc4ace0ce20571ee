"""WebRTC tests: a real aiortc client peer against the in-process server, ICE on 127.0.0.1 only.

They run only inside a private network namespace (``make test`` wraps pytest in ``unshare -n``)
so no ICE check can ever reach a LAN address.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.fake_openai import FakeOpenAI
from tests.support.netns import only_loopback
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer


def pytest_collection_modifyitems(config, items):
    if only_loopback():
        return
    skip = pytest.mark.skip(reason="WebRTC tests run only in a private network namespace: "
                                   "use `make test` (unshare -n)")
    for item in items:
        if "tests/rtc" in str(item.fspath):
            item.add_marker(skip)


@pytest_asyncio.fixture(scope="session")
async def rtc_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


@pytest_asyncio.fixture(scope="session")
async def rtc_server(rtc_llm: FakeOpenAI) -> AsyncIterator[VoiceServer]:
    """Real VAD, STT and TTS; a scripted LLM so answers (and their length) are known."""
    settings = load_settings(port=0, llm_provider="openai_compat", llm_base_url=rtc_llm.base_url,
                             llm_model="fake-model", ice_host_addresses="127.0.0.1",
                             ice_candidate_allow="127.0.0.1",
                             interim_transcripts=False)
    async with VoiceServer(settings) as server:
        yield server


@pytest.fixture
def url(rtc_server: VoiceServer) -> str:
    return f"ws://127.0.0.1:{rtc_server.port}/ws"
