"""Fixtures: a FakeOpenAI upstream and a real caller (aiohttp on 127.0.0.1, port 0) in front."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from tests.support.fake_openai import FakeOpenAI
from voice_server.adapters.caller import (
    CallerHTTPServer,
    CallerOptions,
    CallerService,
    ClientRegistry,
    build_mcp_server,
    build_runtimes,
)
from voice_server.adapters.caller.config import METHODS, parse_providers
from voice_server.config import Settings

TOKEN = "secret-token"
LIMITED_TOKEN = "chat-only-token"


def registry() -> ClientRegistry:
    return ClientRegistry([("test-tool", TOKEN, list(METHODS)),
                           ("limited-tool", LIMITED_TOKEN, ["chat"])])


def catalog(fake: FakeOpenAI, **extra: dict[str, Any]) -> dict[str, Any]:
    """``fake`` (chat default, embed) and ``other`` (chat, no defaults), in that order."""
    return {"providers": {
        "fake": {"baseUrl": fake.base_url, "defaultModel": "fake-model",
                 "capabilities": ["chat", "chatStream", "embed"],
                 "defaults": {"chat": "fake-model", "embed": "text-embedding-3-small"},
                 "scores": {"chat": 70, "embed": 85}},
        "other": {"baseUrl": fake.base_url, "defaultModel": "other-model",
                  "capabilities": ["chat"], "scores": {"chat": 90}},
        **extra}}


@dataclass
class Running:
    url: str
    service: CallerService
    fake: FakeOpenAI | None

    def session(self, token: str | None = TOKEN) -> aiohttp.ClientSession:
        headers = {"x-llm-caller-token": token} if token else {}
        return aiohttp.ClientSession(base_url=self.url, headers=headers)


@contextlib.asynccontextmanager
async def run_caller(document: dict[str, Any], fake: FakeOpenAI | None = None,
                     **options: Any) -> AsyncIterator[Running]:
    options.setdefault("retry_attempts", 1)
    options.setdefault("retry_backoff_s", 0.0)
    runtimes = build_runtimes(parse_providers(document), Settings())
    async with CallerService(runtimes, registry=registry(),
                             options=CallerOptions(**options)) as service:
        async with CallerHTTPServer(service, build_mcp_server(service), port=0) as server:
            yield Running(server.url, service, fake)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as upstream:
        yield upstream


@pytest.fixture(scope="module")
async def _shared_caller() -> AsyncIterator[Running]:
    async with FakeOpenAI() as upstream, run_caller(catalog(upstream), upstream) as running:
        yield running


@pytest.fixture
async def caller(_shared_caller: Running) -> Running:
    """One caller per test module (a caller takes a moment to start and stop); its upstream is
    reset."""
    upstream = _shared_caller.fake
    assert upstream is not None
    upstream.script.clear()
    upstream.embed_script.clear()
    upstream.requests.clear()
    upstream.models_status = 200
    return _shared_caller


def chat_body(request_id: str = "req-1", **extra: Any) -> dict[str, Any]:
    return {"requestId": request_id, "callerTool": "ignored",
            "messages": [{"role": "user", "content": "hi"}], **extra}
