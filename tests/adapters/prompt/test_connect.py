"""Connect JSON over real HTTP: both content types, health, errors."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import aiohttp
import pytest

from tests.support.fake_openai import Reply
from voice_server.adapters.prompt import PromptSidecar, ToolConfig

from .conftest import API_KEY

ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
RUN = "/prompt.v1.PromptService/Run"
JSON = "application/json"
COMPAT = "application/connect+json"


@pytest.fixture
async def http(sidecar: PromptSidecar):
    async with aiohttp.ClientSession(f"http://127.0.0.1:{sidecar.port}") as session:
        yield session


async def post(http: aiohttp.ClientSession, body: Any, content_type: str = JSON,
               headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(RUN, data=data, headers={"Content-Type": content_type,
                                                  **(headers or {})}) as resp:
        raw = await resp.read()
        return resp.status, resp.headers, raw


async def test_health(http):
    """GET /health -> 200 {"status":"ok"} as JSON (check 1)."""
    async with http.get("/health") as resp:
        assert (resp.status, resp.content_type, await resp.read()) == (
            200, JSON, b'{"status":"ok"}')


@pytest.mark.parametrize("content_type", [JSON, COMPAT])
async def test_run_success(http, fake, content_type):
    """A Run answers the canonical object with a ULID, now, and the upstream's token counts."""
    fake.add(Reply(text="hello there", prompt_tokens=7, completion_tokens=3))
    status, headers, raw = await post(http, {"tool_name": "echo",
                                             "input": 'Say "hello" in one short line.',
                                             "max_output_tokens": 64}, content_type)
    assert status == 200
    assert headers["Content-Type"] == content_type
    body = json.loads(raw)
    assert ULID_RE.match(body["id"])
    assert abs(body["created"] - time.time()) < 5
    assert {k: body[k] for k in ("object", "model", "output", "usage")} == {
        "object": "response", "model": "fake-model",
        "output": [{"type": "output_text", "text": "hello there"}],
        "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}}
    if content_type == COMPAT:
        assert headers["Connect-Protocol-Version"] == "1" and raw.endswith(b"}\n")
    sent = fake.requests[-1]
    assert sent["messages"] == [{"role": "user", "content": 'Say "hello" in one short line.'}]
    assert (sent["model"], sent["max_tokens"], sent["temperature"]) == ("fake-model", 64, 0.7)
    assert fake.request_headers[-1]["Authorization"] == f"Bearer {API_KEY}"


async def test_ids_are_unique_and_sortable(http, fake):
    """Two answers carry distinct, time-ordered ULIDs."""
    ids = [json.loads((await post(http, {"tool_name": "echo", "input": "x"}))[2])["id"]
           for _ in range(2)]
    assert ids[0] != ids[1] and ids[0][:10] <= ids[1][:10]


async def test_missing_tool_name(http):
    """No tool_name: 400 invalid_argument (standard); the origin's 200 envelope (compat)."""
    status, headers, raw = await post(http, {"input": "x"})
    assert (status, headers["Content-Type"], json.loads(raw)) == (
        400, JSON, {"code": "invalid_argument", "message": "tool_name is required"})
    status, headers, raw = await post(http, {"input": "x"}, COMPAT)
    assert (status, headers["Connect-Error-Code"], json.loads(raw)) == (
        200, "invalid_argument", {"error": {"code": "invalid_argument",
                                            "message": "tool_name is required",
                                            "details": []}})


async def test_unknown_tool(http):
    """An unknown tool is not_found "tool not found" (check 4)."""
    status, _, raw = await post(http, {"tool_name": "nope", "input": "x"})
    assert (status, json.loads(raw)) == (404, {"code": "not_found",
                                              "message": "tool not found"})
    status, headers, raw = await post(http, {"tool_name": "nope"}, COMPAT)
    assert (status, headers["Connect-Error-Code"]) == (200, "not_found")
    assert json.loads(raw)["error"]["message"] == "tool not found"


@pytest.mark.parametrize("body", [b"{", b"", b"[1]", b'{"tool_name": 1}'])
async def test_invalid_json_body(http, body):
    """Undecodable bodies: invalid_argument "invalid JSON body" (check 5)."""
    status, _, raw = await post(http, body)
    assert (status, json.loads(raw)) == (400, {"code": "invalid_argument",
                                              "message": "invalid JSON body"})


@pytest.mark.parametrize(("method", "path"), [("GET", RUN), ("PUT", RUN),
                                              ("POST", "/prompt.v1.PromptService/Other"),
                                              ("GET", "/")])
async def test_wrong_method_or_path_is_404(http, method, path):
    """Other methods and paths get Go's plain 404 (check 6)."""
    async with http.request(method, path) as resp:
        assert (resp.status, await resp.text()) == (404, "404 page not found\n")


async def test_model_override_is_sent_and_echoed(http, fake):
    """The request's model wins over the tool's and is echoed (check 7)."""
    status, _, raw = await post(http, {"tool_name": "echo", "input": "x", "model": "other"})
    assert status == 200 and json.loads(raw)["model"] == "other"
    assert fake.requests[-1]["model"] == "other"


async def test_input_blocks_become_one_prompt(http, fake):
    """Array input is joined as the origin does (check 8), camelCase keys accepted."""
    blocks = [{"type": "text", "text": "a"}, {"content": "b"}, "c", {"x": 1}]
    status, _, _ = await post(http, {"toolName": "echo", "input": blocks})
    assert status == 200
    assert fake.requests[-1]["messages"][-1]["content"] == 'a\nb\nc\n{"x":1}'


async def test_zero_values_use_tool_defaults(http, fake):
    """temperature 0 / max_output_tokens 0 fall back to the tool; others override (check 9)."""
    await post(http, {"tool_name": "echo", "input": "x", "temperature": 0,
                      "max_output_tokens": 0})
    assert (fake.requests[-1]["temperature"], fake.requests[-1]["max_tokens"]) == (0.7, 32)
    await post(http, {"tool_name": "echo", "input": "x", "temperature": 0.2,
                      "max_output_tokens": 5})
    assert (fake.requests[-1]["temperature"], fake.requests[-1]["max_tokens"]) == (0.2, 5)


async def test_factory_errors(http, store):
    """A bad provider or a missing model: internal with the factory's message (check 10)."""
    await store.put(ToolConfig(name="bad", provider="nope", model="m"))
    await store.put(ToolConfig(name="nomodel", provider="ollama"))
    status, _, raw = await post(http, {"tool_name": "bad", "input": "x"})
    assert (status, json.loads(raw)) == (500, {"code": "internal", "message":
                                              'llmfactory: unsupported provider "nope"'})
    status, _, raw = await post(http, {"tool_name": "nomodel", "input": "x"}, COMPAT)
    assert json.loads(raw)["error"] == {"code": "internal", "details": [], "message":
                                        'llmfactory: missing model for provider "ollama"'}


async def test_missing_secret(http, store, fake):
    """A secret the vault does not hold: not_found "secret not found"; no upstream call."""
    await store.put(ToolConfig(name="locked", provider="openai", model="m",
                               base_url=fake.base_url, api_key_secret="absent"))
    status, _, raw = await post(http, {"tool_name": "locked", "input": "x"})
    assert (status, json.loads(raw)) == (404, {"code": "not_found",
                                              "message": "secret not found"})
    assert fake.requests == []


@pytest.mark.parametrize(("upstream", "status", "code"), [
    (429, 429, "resource_exhausted"), (500, 503, "unavailable"), (503, 503, "unavailable"),
    (401, 400, "failed_precondition"), (400, 400, "invalid_argument"), (404, 404, "not_found"),
])
async def test_provider_failures_are_mapped_without_leaks(http, fake, upstream, status, code):
    """Upstream errors map to Connect codes; the upstream's message never leaks."""
    fake.add(Reply(status=upstream, error_message="DRIVER-DETAIL sk-live-123",
                   headers={"Retry-After": "1"} if upstream == 429 else {}))
    got_status, _, raw = await post(http, {"tool_name": "echo", "input": "x"})
    assert got_status == status
    assert json.loads(raw)["code"] == code
    assert b"DRIVER-DETAIL" not in raw and b"sk-live" not in raw


async def test_unreachable_upstream(http, store):
    """An upstream nobody listens on is unavailable."""
    await store.put(ToolConfig(name="down", provider="openai", model="m",
                               base_url="http://127.0.0.1:9/v1"))
    status, _, raw = await post(http, {"tool_name": "down", "input": "x"})
    assert (status, json.loads(raw)) == (503, {"code": "unavailable", "message":
                                              "the model provider is unavailable"})


async def test_tool_calls_are_output_blocks(http, fake):
    """Tool definitions are forwarded; tool calls come back as tool_call blocks."""
    fake.add(Reply(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}]))
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}}}}}]
    status, _, raw = await post(http, {"tool_name": "echo", "input": "weather?",
                                       "tools": tools})
    assert status == 200
    assert json.loads(raw)["output"] == [{"type": "tool_call", "tool_call": {
        "name": "get_weather", "arguments": {"city": "Paris"}}}]
    assert fake.requests[-1]["tools"] == tools


async def test_connect_timeout_header(http, fake):
    """Connect-Timeout-Ms bounds the call: deadline_exceeded (504)."""
    fake.add(Reply(text="late", delay_s=0.5))
    status, _, raw = await post(http, {"tool_name": "echo", "input": "x"},
                                headers={"Connect-Timeout-Ms": "20"})
    assert (status, json.loads(raw)["code"]) == (504, "deadline_exceeded")
    status, _, raw = await post(http, {"tool_name": "echo", "input": "x"},
                                headers={"Connect-Timeout-Ms": "soon"})
    assert (status, json.loads(raw)["code"]) == (400, "invalid_argument")


async def test_unsupported_codec(http):
    """application/proto is refused with 415."""
    status, _, _ = await post(http, b"\x0a\x01t", "application/proto")
    assert status == 415


async def test_system_prompt_setting(http, fake, store):
    """A tool's settings.system_prompt becomes the system message."""
    await store.put(ToolConfig(name="sys", provider="openai", model="m",
                               base_url=fake.base_url, settings={"system_prompt": "Be terse."}))
    await post(http, {"tool_name": "sys", "input": "hi"})
    assert fake.requests[-1]["messages"] == [{"role": "system", "content": "Be terse."},
                                            {"role": "user", "content": "hi"}]


async def test_concurrent_runs(http, fake):
    """Concurrent requests are served independently."""
    fake.default_text = "ok"
    results = await asyncio.gather(*(post(http, {"tool_name": "echo", "input": str(i)})
                                     for i in range(8)))
    assert [r[0] for r in results] == [200] * 8
    assert len({json.loads(r[2])["id"] for r in results}) == 8


async def test_close_is_idempotent(service):
    """aclose() twice is harmless and the port is released."""
    sidecar = PromptSidecar(service, port=0, grpc_port=0)
    async with sidecar:
        port = sidecar.port
    await sidecar.aclose()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/health"):
            pass


async def test_oversized_body(http):
    """A body over the 4 MiB limit is invalid_argument, not a crash."""
    status, _, raw = await post(http, b'{"tool_name":"echo","input":"' + b"x" * (5 << 20) + b'"}')
    assert (status, json.loads(raw)) == (400, {"code": "invalid_argument",
                                              "message": "request body too large"})


async def test_unexpected_failure_is_generic(store, fake):
    """A crash inside a provider builder answers internal "internal error", no traceback."""
    from voice_server.adapters.prompt import EnvFileVault, LLMFactory, PromptService

    def explode(spec, registry):
        raise RuntimeError("boom sk-secret")

    factory = LLMFactory(kinds={"explode": explode})
    await store.put(ToolConfig(name="x", provider="explode", model="m"))
    service = PromptService(store, EnvFileVault(environ={}), factory)
    async with PromptSidecar(service, port=0, grpc_port=None) as sidecar, \
            aiohttp.ClientSession(f"http://127.0.0.1:{sidecar.port}") as session:
        status, _, raw = await post(session, {"tool_name": "x", "input": "y"})
    assert (status, json.loads(raw)) == (500, {"code": "internal", "message": "internal error"})
