"""Faults the scripted upstream cannot produce: failures mid-stream, client disconnects, a
local provider without its chat model (spec "Response metadata", "Transport status")."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from tests.support.sse import SSEDecoder
from voice_server.adapters.caller import (
    CallerHTTPServer,
    CallerOptions,
    CallerService,
    ProviderRuntime,
    build_mcp_server,
)
from voice_server.adapters.caller.config import ProviderEntry
from voice_server.adapters.caller.stream import DONE_FRAME
from voice_server.llm import ChatRequest, LLMUnavailable, StreamEvent
from voice_server.llm.embeddings import MiniLMEmbeddingProvider

from .conftest import TOKEN, chat_body, registry


class StubProvider:
    """Streams ``parts`` then fails with ``error`` (or waits forever when ``hang``)."""

    supports_vision = False

    def __init__(self, parts: list[str], error: Exception | None = None, hang: bool = False):
        self.name = "stub"
        self.default_model = "stub-model"
        self.parts, self.error, self.hang = parts, error, hang
        self.closed = asyncio.Event()

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        try:
            for part in self.parts:
                yield StreamEvent(text=part)
            if self.hang:
                await asyncio.Event().wait()
            if self.error is not None:
                raise self.error
            yield StreamEvent(done=True)
        finally:
            self.closed.set()

    async def complete(self, request: ChatRequest) -> Any:
        raise LLMUnavailable("down")

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        raise LLMUnavailable("down")

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        return {"status": "ok"}

    async def aclose(self) -> None:
        return None


@contextlib.asynccontextmanager
async def serve(runtime: ProviderRuntime) -> AsyncIterator[str]:
    async with CallerService({runtime.key: runtime}, registry=registry(),
                             options=CallerOptions(retry_attempts=1)) as service:
        async with CallerHTTPServer(service, build_mcp_server(service), port=0) as server:
            yield server.url


def stub_runtime(provider: StubProvider) -> ProviderRuntime:
    entry = ProviderEntry(baseUrl="http://127.0.0.1:1/v1", defaultModel="stub-model",
                          capabilities=["chat", "chatStream"])
    return ProviderRuntime("stub", entry, chat=provider)


async def _stream(url: str) -> bytes:
    async with aiohttp.ClientSession(headers={"x-llm-caller-token": TOKEN}) as http:
        resp = await http.post(f"{url}/mcp/chatStream", json=chat_body("f-1"))
        assert resp.status == 200
        return await resp.read()


async def test_provider_failure_mid_stream() -> None:
    """Deltas already sent stay; the failure is the last event (TEMPORARY), then [DONE]."""
    async with serve(stub_runtime(StubProvider(["par", "tial"], LLMUnavailable("x")))) as url:
        raw = await _stream(url)
    frames = SSEDecoder().feed(raw)
    assert [json.loads(f)["delta"]["content"] for f in frames[:2]] == ["par", "tial"]
    assert json.loads(frames[2]) == {"error": "TEMPORARY",
                                     "message": "Provider encountered a temporary error."}
    assert frames[3:] == ["[DONE]"]


async def test_unexpected_failure_mid_stream() -> None:
    """A non-provider exception: INTERNAL_ERROR "Chat stream failed", no traceback."""
    async with serve(stub_runtime(StubProvider(["x"], RuntimeError("boom /secret")))) as url:
        raw = await _stream(url)
    assert raw.endswith(b'data: {"error":"INTERNAL_ERROR","message":"Chat stream failed"}\n\n'
                        + DONE_FRAME)
    assert b"secret" not in raw and b"Traceback" not in raw


async def test_client_disconnect_closes_upstream_stream() -> None:
    """Dropping the SSE connection mid-stream closes the provider's stream."""
    provider = StubProvider(["first"], hang=True)
    async with serve(stub_runtime(provider)) as url:
        async with aiohttp.ClientSession(headers={"x-llm-caller-token": TOKEN}) as http:
            resp = await http.post(f"{url}/mcp/chatStream", json=chat_body())
            first = await resp.content.readuntil(b"\n\n")
            resp.close()
        await asyncio.wait_for(provider.closed.wait(), 5)
    assert json.loads(first.removeprefix(b"data: "))["delta"]["content"] == "first"


async def test_local_provider_without_chat_model() -> None:
    """A local entry whose chat model is missing: chat is CONFIG 500, health shows coverage."""
    entry = ProviderEntry(kind="local", capabilities=["chat", "chatStream", "embed"],
                          defaults={"embed": "all-MiniLM-L6-v2"})
    runtime = ProviderRuntime("local", entry, embedder=MiniLMEmbeddingProvider(name="local"),
                              problem="Chat model unavailable")
    async with serve(runtime) as url:
        async with aiohttp.ClientSession(headers={"x-llm-caller-token": TOKEN}) as http:
            chat = await http.post(f"{url}/mcp/chat", json=chat_body("c-1"))
            chat_body_json = await chat.json()
            health = await (await http.get(f"{url}/health")).json()
    assert chat.status == 500
    assert chat_body_json == {"error": "CONFIG", "message": "Provider configuration error.",
                              "traceId": "c-1"}
    component = health["components"][2]
    assert health["status"] == "degraded" and component["details"] == "Chat model unavailable"
    assert component["capabilityCoverage"] == [
        {"capability": "chat", "status": "failed"},
        {"capability": "chatStream", "status": "failed"},
        {"capability": "embed", "status": "ok"}]
