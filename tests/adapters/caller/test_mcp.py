"""The caller's MCP tools driven by the official SDK client, over streamable HTTP (``/mcp`` on the
caller's port) and over stdio (``voice-server sidecar caller --stdio``)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support.fake_openai import FakeOpenAI, Reply

from .conftest import LIMITED_TOKEN, TOKEN, Running, catalog

TOOL_NAMES = {"chat", "chatStream", "embed", "listModels", "getHealth"}
ROOT = Path(__file__).resolve().parents[3]


@contextlib.asynccontextmanager
async def mcp_http(caller: Running, token: str = TOKEN, mode: str = "auto",
                   ) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"x-llm-caller-token": token})
    async with http, Client(streamable_http_client(f"{caller.url}/mcp", http_client=http),
                            read_timeout_seconds=20, mode=mode) as client:
        yield client


def _json(result) -> dict:
    return json.loads(result.content[0].text)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_lists_the_five_tools(caller: Running, mode: str) -> None:
    """tools/list (discover era and initialize handshake): five tools, no callerTool."""
    async with mcp_http(caller, mode=mode) as client:
        tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOL_NAMES
    chat = next(t for t in tools if t.name == "chat")
    assert "callerTool" not in chat.input_schema["properties"]
    assert chat.input_schema["required"] == ["requestId", "messages"]


async def test_http_chat_tool(caller: Running) -> None:
    """tools/call chat: structuredContent and the same JSON as text, routed like REST."""
    caller.fake.add("from MCP")
    async with mcp_http(caller) as client:
        result = await client.call_tool("chat", {
            "requestId": "m-1", "messages": [{"role": "user", "content": "hi"}]})
    assert result.is_error is False
    assert result.structured_content == _json(result)
    assert result.structured_content["message"]["content"] == "from MCP"
    assert result.structured_content["providerInfo"]["routing"] == {
        "capability": "chat", "strategy": "capability-default"}


async def test_http_chat_stream_tool_reports_progress(caller: Running) -> None:
    """chatStream returns every event; deltas also arrive as progress notifications."""
    caller.fake.add("one two three")
    seen: list[str | None] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with mcp_http(caller) as client:
        result = await client.call_tool("chatStream", {
            "requestId": "m-2", "messages": [{"role": "user", "content": "count"}]},
            progress_callback=progress)
    events = result.structured_content["events"]
    assert [e["delta"]["content"] for e in events[:-1]] == ["one", " two", " three"]
    assert events[-1]["type"] == "completion"
    assert seen == ["one", " two", " three"]


async def test_http_provider_error_is_tool_error(caller: Running) -> None:
    """An upstream 429 comes back as isError with the taxonomy body."""
    caller.fake.add(Reply(status=429, headers={"Retry-After": "5"}))
    async with mcp_http(caller) as client:
        result = await client.call_tool("chat", {
            "requestId": "m-3", "messages": [{"role": "user", "content": "hi"}]})
    assert result.is_error is True
    assert _json(result) == {"error": "RATE_LIMIT", "message": "Provider rate limited the "
                             "request.", "retryAfterMs": 5000, "traceId": "m-3"}


async def test_http_schema_error_and_permission(caller: Running) -> None:
    """Bad arguments: BAD_REQUEST tool error; a tool outside the client's methods: FORBIDDEN."""
    async with mcp_http(caller) as client:
        bad = await client.call_tool("chat", {"requestId": "m-4", "messages": []})
    async with mcp_http(caller, LIMITED_TOKEN) as client:
        denied = await client.call_tool("getHealth", {})
    assert bad.is_error and _json(bad)["error"] == "BAD_REQUEST"
    assert denied.is_error and _json(denied)["message"] == "Client not permitted to call getHealth"


async def test_http_unknown_tool_is_invalid_params(caller: Running) -> None:
    """An unknown tool is JSON-RPC -32602 "Unknown tool: x"."""
    async with mcp_http(caller) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("nope", {})
    assert info.value.code == -32602 and info.value.message == "Unknown tool: nope"


async def test_http_mcp_needs_a_token(caller: Running) -> None:
    """/mcp without a token: 401; with an unknown token: 403 (before any JSON-RPC)."""
    frame = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with aiohttp.ClientSession(base_url=caller.url) as http:
        missing = await http.post("/mcp", json=frame, headers=headers)
        unknown = await http.post("/mcp", json=frame,
                                  headers={**headers, "x-llm-caller-token": "nope"})
        bodies = (await missing.json(), await unknown.json())
    assert (missing.status, unknown.status) == (401, 403)
    assert [b["error"] for b in bodies] == ["UNAUTHORIZED", "FORBIDDEN"]


async def test_stdio_lists_and_calls_tools(fake: FakeOpenAI, tmp_path: Path) -> None:
    """``voice-server sidecar caller --stdio``: list the tools, chat and list models."""
    providers = tmp_path / "providers.json"
    providers.write_text(json.dumps(catalog(fake)))
    params = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT),
        args=["-m", "voice_server.cli", "sidecar", "caller", "--stdio",
              "--providers", str(providers)])
    fake.add("over stdio")
    async with Client(params, read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        chat = await client.call_tool("chat", {
            "requestId": "s-1", "messages": [{"role": "user", "content": "hi"}]})
        models = await client.call_tool("listModels", {"provider": "other"})
    assert names == TOOL_NAMES
    assert chat.is_error is False
    assert chat.structured_content["message"]["content"] == "over stdio"
    assert models.structured_content == {"provider": "other", "models": [
        {"id": "fake-model", "ready": True, "scores": {"chat": 90}}]}
