"""Fixtures for issue 9: a real redis-server on loopback, servers sharing it, a scripted LLM."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.conftest import scaled
from tests.support.fake_openai import FakeOpenAI
from tests.support.netns import free_port
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer


class RedisProcess:
    """``redis-server`` on 127.0.0.1 with no persistence, stoppable and restartable."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            "redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
            "--dir", str(self.workdir), "--save", "", "--appendonly", "no",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        assert self.proc.stdout is not None
        async with asyncio.timeout(scaled(15)):
            while b"Ready to accept connections" not in await self.proc.stdout.readline():
                if self.proc.returncode is not None:
                    raise RuntimeError("redis-server failed to start")
        self._drain = asyncio.create_task(self._discard_output(), name="redis-output")

    async def _discard_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while await self.proc.stdout.readline():
            pass

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()
            await self._drain
        self.proc = None


@pytest_asyncio.fixture(scope="session")
async def redis_proc(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RedisProcess]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is needed (make test installs it)")
    proc = RedisProcess(tmp_path_factory.mktemp("redis"))
    await proc.start()
    yield proc
    await proc.stop()


@pytest_asyncio.fixture(scope="session")
async def scale_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(default_text="Okay.") as fake:
        yield fake


def scripted_settings(fake: FakeOpenAI, **extra: Any):
    return load_settings(port=0, llm_provider="openai_compat", llm_base_url=fake.base_url,
                         llm_model="fake-model", **extra)


@pytest_asyncio.fixture(scope="session")
async def pair(redis_proc: RedisProcess, scale_llm: FakeOpenAI
               ) -> AsyncIterator[tuple[VoiceServer, VoiceServer]]:
    """Two instances with real STT/TTS sharing one Redis and one scripted LLM.
    B has a short LLM timeout for the fault tests."""
    a = VoiceServer(scripted_settings(scale_llm, session_store=redis_proc.url))
    b = VoiceServer(scripted_settings(scale_llm, session_store=redis_proc.url,
                                      llm_timeout_s=2.0))
    async with a, b:
        yield a, b


@pytest.fixture
def connect():
    """``async with connect(server, query="token=...") as client`` -> Client after ``ready``
    (``ready=False``: do not read it, e.g. when auth or a limit answers first)."""
    from contextlib import asynccontextmanager

    import websockets

    from tests.integration.conftest import Client, ws_url

    @asynccontextmanager
    async def _connect(server: VoiceServer, *, query: str = "", ready: bool = True, **kw: Any):
        url = ws_url(server) + (f"?{query}" if query else "")
        async with websockets.connect(url, max_size=None, **kw) as ws:
            client = Client(ws)
            if ready:
                client.ready = await client.recv()
                assert client.ready["type"] == "ready", client.ready
            yield client

    return _connect
