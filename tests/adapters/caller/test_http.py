"""The caller's REST + SSE interface over real HTTP against a scripted OpenAI-compatible upstream
(the original's behaviour; spec "Transport status & retry semantics")."""

from __future__ import annotations

import asyncio
import json
import re
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from yarl import URL

from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.sse import SSEDecoder
from voice_server.adapters.caller import build_app, build_mcp_server
from voice_server.adapters.caller.schemas import load_schema
from voice_server.adapters.caller.stream import DONE_FRAME, encode_event

from .conftest import LIMITED_TOKEN, TOKEN, Running, catalog, chat_body, registry, run_caller

# -- access control (check 1) -----------------------------------------------------------------


async def test_missing_token_is_401(caller: Running) -> None:
    """No token header: 401 UNAUTHORIZED with a traceId."""
    async with caller.session(token=None) as http:
        resp = await http.post("/mcp/chat", json=chat_body())
        body = await resp.json()
    assert resp.status == 401
    assert body["error"] == "UNAUTHORIZED" and body["message"] == "Missing client token"
    assert body["traceId"] and resp.headers["x-trace-id"] == body["traceId"]


async def test_unknown_token_is_403(caller: Running) -> None:
    """An unregistered token: 403 FORBIDDEN "Unknown client token"."""
    async with caller.session(token="nope") as http:
        resp = await http.get("/health")
        body = await resp.json()
    assert (resp.status, body["error"], body["message"]) == (403, "FORBIDDEN",
                                                             "Unknown client token")


@pytest.mark.parametrize("path", ["/mcp/chat", "/mcp"])
async def test_a_token_that_is_not_utf8_is_an_unknown_token(caller: Running, path: str) -> None:
    """A header byte that is not UTF-8 arrives as a lone surrogate: hashing it raised, and the
    client got 500 INTERNAL_ERROR (a fuzzing run, 2026-11-30)."""
    url = URL(caller.url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    body = json.dumps(chat_body()).encode()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Accept: application/json, text/event-stream\r\nConnection: close\r\n"
                 f"Content-Length: {len(body)}\r\n".encode() +
                 b"x-llm-caller-token: \xff\r\nAuthorization: Bearer \xff\r\n\r\n" + body)
    await writer.drain()
    head, _, answer = (await asyncio.wait_for(reader.read(), 10)).partition(b"\r\n\r\n")
    writer.close()
    assert head.split()[1] == b"403", head + answer
    assert b"Unknown client token" in answer


async def test_missing_permission_is_403(caller: Running) -> None:
    """A client without the ``models`` permission cannot list models."""
    async with caller.session(token=LIMITED_TOKEN) as http:
        resp = await http.get("/mcp/models")
        body = await resp.json()
    assert resp.status == 403
    assert body["message"] == "Client not permitted to call models"


async def test_non_loopback_peer_is_403(caller: Running) -> None:
    """A peer address outside loopback is refused before auth or routing (the application's
    first middleware, given a request from 10.1.2.3)."""
    app = build_app(caller.service, build_mcp_server(caller.service))
    transport = mock.Mock()
    transport.get_extra_info.side_effect = \
        lambda name, default=None: ("10.1.2.3", 40000) if name == "peername" else default
    request = make_mocked_request("POST", "/mcp/chat", headers={"x-llm-caller-token": TOKEN},
                                  transport=transport, app=app)

    async def handler(request: web.Request) -> web.Response:
        raise AssertionError("a non-loopback request reached a route")

    resp = await app.middlewares[0](request, handler)
    assert resp.status == 403
    assert json.loads(resp.body)["message"] == "Loopback access only"


# -- chat and routing (checks 2, 3) -----------------------------------------------------------


async def test_chat_capability_default(caller: Running) -> None:
    """Plain chat: 200, the default provider's model, no retryAfterMs, upstream traceId."""
    caller.fake.add("Hello there")
    async with caller.session() as http:
        resp = await http.post("/mcp/chat", json=chat_body())
        body = await resp.json()
    assert resp.status == 200
    assert body["message"] == {"role": "assistant", "content": "Hello there"}
    assert "retryAfterMs" not in body and "Retry-After" not in resp.headers
    assert body["providerInfo"] == {"name": "fake", "model": "fake-model", "routing": {
        "capability": "chat", "strategy": "capability-default"}}
    assert body["traceId"] == "chatcmpl-fake" and body["requestId"] == "req-1"
    assert body["usage"] == {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}
    assert caller.fake.requests[-1]["model"] == "fake-model"


async def test_chat_caller_override(caller: Running) -> None:
    """``provider`` in the body: caller-override with that provider's default model."""
    async with caller.session() as http:
        body = await (await http.post("/mcp/chat", json=chat_body(provider="other"))).json()
    assert body["providerInfo"]["name"] == "other"
    assert body["providerInfo"]["routing"] == {"capability": "chat",
                                               "strategy": "caller-override"}
    assert caller.fake.requests[-1]["model"] == "other-model"


async def test_chat_unknown_provider_is_the_client_s_bad_request(caller: Running) -> None:
    """An unknown provider override is the client's mistake: 400 BAD_REQUEST naming the
    configured ones (the original: 500 INTERNAL_ERROR "Chat dispatch failed")."""
    async with caller.session() as http:
        resp = await http.post("/mcp/chat", json=chat_body("r-x", provider="missing"))
        body = await resp.json()
    assert resp.status == 400
    assert body == {"error": "BAD_REQUEST", "traceId": "r-x", "message":
                    "Unknown provider 'missing'; configured: ['fake', 'other']"}


async def test_caller_tool_comes_from_token(caller: Running) -> None:
    """The body's callerTool is replaced by the token's toolId before dispatch."""
    client = caller.service.registry.lookup(TOKEN)
    prepared = caller.service._prepare("chat_request", chat_body(), client)
    assert prepared["callerTool"] == "test-tool"


# -- upstream failures -> taxonomy (checks 4-6) -----------------------------------------------


async def test_rate_limit_exact_body_and_header(caller: Running) -> None:
    """Upstream 429 with Retry-After 5: 429, header "5", the exact sanitized body."""
    caller.fake.add(Reply(status=429, headers={"Retry-After": "5"}))
    async with caller.session() as http:
        resp = await http.post("/mcp/chat", json=chat_body("retry-1"))
        body = await resp.json()
    assert resp.status == 429 and resp.headers["Retry-After"] == "5"
    assert body == {"error": "RATE_LIMIT", "message": "Provider rate limited the request.",
                    "retryAfterMs": 5000, "traceId": "retry-1"}


async def test_retry_after_is_clamped_to_60s(caller: Running) -> None:
    """A 120 s hint becomes Retry-After 60 and retryAfterMs 60000."""
    caller.fake.add(Reply(status=429, headers={"Retry-After": "120"}))
    async with caller.session() as http:
        resp = await http.post("/mcp/chat", json=chat_body())
        body = await resp.json()
    assert resp.headers["Retry-After"] == "60" and body["retryAfterMs"] == 60000


@pytest.mark.parametrize(("status", "code", "http_status", "message"), [
    (401, "AUTH", 502, "Provider authentication failed."),
    (403, "AUTH", 502, "Provider authentication failed."),
    (503, "TEMPORARY", 503, "Provider encountered a temporary error."),
    (500, "TEMPORARY", 503, "Provider encountered a temporary error."),
    (400, "PERMANENT", 422, "Provider rejected the request."),
])
async def test_upstream_status_maps_to_taxonomy(caller: Running, status: int, code: str,
                                                http_status: int, message: str) -> None:
    """Upstream 401/403/5xx/400 map to AUTH 502, TEMPORARY 503, PERMANENT 422, sanitized."""
    caller.fake.add(Reply(status=status, error_message="secret upstream detail"))
    async with caller.session() as http:
        resp = await http.post("/mcp/chat", json=chat_body("t-1"))
        body = await resp.json()
    assert resp.status == http_status
    assert body == {"error": code, "message": message, "traceId": "t-1"}


async def test_embed_auth_failure(caller: Running) -> None:
    """Embed upstream 401: 502 AUTH with the requestId as traceId (check 6)."""
    caller.fake.add_embed(Reply(status=401))
    async with caller.session() as http:
        resp = await http.post("/mcp/embed", json={"requestId": "embed-fail",
                                                   "callerTool": "t", "inputs": ["hello"]})
        body = await resp.json()
    assert resp.status == 502
    assert body == {"error": "AUTH", "message": "Provider authentication failed.",
                    "traceId": "embed-fail"}


async def test_chat_retries_temporary_then_succeeds(fake: FakeOpenAI) -> None:
    """With 2 attempts a 503 then a success gives 200 after two upstream calls."""
    fake.add(Reply(status=503), "recovered")
    async with run_caller(catalog(fake), fake, retry_attempts=2) as caller:
        async with caller.session() as http:
            resp = await http.post("/mcp/chat", json=chat_body())
            body = await resp.json()
    assert resp.status == 200 and body["message"]["content"] == "recovered"
    assert len(fake.requests) == 2


async def test_chat_does_not_retry_permanent(fake: FakeOpenAI) -> None:
    """PERMANENT errors are not retried: one upstream call, 422."""
    fake.add(Reply(status=400), "never used")
    async with run_caller(catalog(fake), fake, retry_attempts=3) as caller:
        async with caller.session() as http:
            resp = await http.post("/mcp/chat", json=chat_body())
    assert resp.status == 422 and len(fake.requests) == 1


async def test_retries_exhausted_keep_hint(fake: FakeOpenAI) -> None:
    """Two 429s with 2 attempts: 429 keeping the last hint (spec over origin quirk)."""
    fake.add(Reply(status=429, headers={"Retry-After": "0.01"}),
             Reply(status=429, headers={"Retry-After": "2"}))
    async with run_caller(catalog(fake), fake, retry_attempts=2) as caller:
        async with caller.session() as http:
            resp = await http.post("/mcp/chat", json=chat_body())
            body = await resp.json()
    assert resp.status == 429 and resp.headers["Retry-After"] == "2"
    assert body["retryAfterMs"] == 2000 and len(fake.requests) == 2


# -- embed (check 7) --------------------------------------------------------------------------


async def test_embed_through_openai_compatible_provider(caller: Running) -> None:
    """Embed routes by capability to ``fake``'s /v1/embeddings with its default embed model."""
    async with caller.session() as http:
        resp = await http.post("/mcp/embed", json={
            "requestId": "embed-1", "callerTool": "t", "inputs": ["hello", "two words"]})
        body = await resp.json()
    assert resp.status == 200
    assert len(body["vectors"]) == 2 and len(body["vectors"][0]) == 16
    assert body["usage"]["inputTokens"] == 3
    assert body["providerInfo"] == {"name": "fake", "model": "text-embedding-3-small",
                                    "routing": {"capability": "embed",
                                                "strategy": "capability-default"}}
    assert body["traceId"] == "embed-1"
    assert caller.fake.requests[-1]["model"] == "text-embedding-3-small"


# -- per-client rate limit (check 8) ----------------------------------------------------------


async def test_rate_limit_per_client(fake: FakeOpenAI) -> None:
    """max 1 per window: the second call is 429 RATE_LIMIT with a Retry-After hint."""
    async with run_caller(catalog(fake), fake, rate_limit_max=1,
                          rate_limit_interval_ms=60_000) as caller:
        async with caller.session() as http:
            first = await http.post("/mcp/chat", json=chat_body("a"))
            second = await http.post("/mcp/chat", json=chat_body("b"))
            body = await second.json()
            health = await http.get("/health")
    assert first.status == 200 and second.status == 429
    assert body["error"] == "RATE_LIMIT" and re.search("too many requests", body["message"], re.I)
    assert 0 < body["retryAfterMs"] <= 60_000 and body["traceId"] == "b"
    assert second.headers["Retry-After"] == str(-(-body["retryAfterMs"] // 1000))
    assert health.status == 200  # health is not rate-limited
    assert len(fake.requests) == 1


# -- chatStream (checks 9-11) -----------------------------------------------------------------


async def test_chat_stream_exact_frames(caller: Running) -> None:
    """Deltas then a completion then [DONE], byte for byte; parsed back by the SSE decoder."""
    caller.fake.add("Hel lo")
    async with caller.session() as http:
        resp = await http.post("/mcp/chatStream", json=chat_body("s-1"))
        raw = await resp.read()
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers["Cache-Control"] == "no-cache"
    info = {"name": "fake", "model": "fake-model",
            "routing": {"capability": "chatStream", "strategy": "fallback"}}
    expected = [
        {"type": "delta", "delta": {"content": "Hel"}, "traceId": "s-1"},
        {"type": "delta", "delta": {"content": " lo"}, "traceId": "s-1"},
        {"type": "completion", "payload": {
            "message": {"role": "assistant", "content": "Hel lo"},
            "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3},
            "providerInfo": info}, "traceId": "s-1"},
    ]
    assert raw == b"".join(encode_event(e) for e in expected) + DONE_FRAME
    decoder = SSEDecoder()
    data = [d for i in range(len(raw)) for d in decoder.feed(raw[i:i + 1])]
    assert [json.loads(d) for d in data[:-1]] == expected and data[-1] == "[DONE]"


async def test_chat_stream_sanitizes(caller: Running) -> None:
    """4100 chars + BEL become 4000 clean chars; a mostly-binary delta is dropped."""
    caller.fake.add("A" * 4100 + "\x07", "\x01\x02Binary")
    async with caller.session() as http:
        long = await (await http.post("/mcp/chatStream", json=chat_body())).read()
        binary = await (await http.post("/mcp/chatStream", json=chat_body())).read()
    frames = [json.loads(d) for d in SSEDecoder().feed(long)[:-1]]
    assert frames[0]["delta"]["content"] == "A" * 4000
    assert frames[1]["payload"]["message"]["content"] == "A" * 4000
    assert binary == DONE_FRAME


async def test_chat_stream_provider_error_is_final_event(caller: Running) -> None:
    """Upstream 429 on a stream: status 200, an error frame without traceId, then [DONE]."""
    caller.fake.add(Reply(status=429, headers={"Retry-After": "5"}))
    async with caller.session() as http:
        resp = await http.post("/mcp/chatStream", json=chat_body())
        raw = await resp.read()
    assert resp.status == 200
    assert raw == (b'data: {"error":"RATE_LIMIT","message":"Provider rate limited the '
                   b'request.","retryAfterMs":5000}\n\n' + DONE_FRAME)


async def test_chat_stream_schema_error_is_400(caller: Running) -> None:
    """Validation happens before the stream starts: a plain 400."""
    async with caller.session() as http:
        resp = await http.post("/mcp/chatStream", json=chat_body(messages=[]))
    assert resp.status == 400 and (await resp.json())["error"] == "BAD_REQUEST"


# -- models and health (checks 12, 13) --------------------------------------------------------


async def test_models(caller: Running) -> None:
    """GET /mcp/models?provider=fake lists ids with ready, defaults and scores."""
    async with caller.session() as http:
        body = await (await http.get("/mcp/models?provider=fake")).json()
        default = await (await http.get("/mcp/models")).json()
        missing = await http.get("/mcp/models?provider=nope")
        missing_body = await missing.json()
    assert body == {"provider": "fake", "models": [
        {"id": "fake-model", "ready": True, "defaults": ["chat"],
         "scores": {"chat": 70, "embed": 85}}]}
    assert default["provider"] == "fake"
    assert missing.status == 400  # the client's mistake (the original said 500 INTERNAL_ERROR)
    assert (missing_body["error"], missing_body["message"]) == (
        "BAD_REQUEST", "Unknown provider 'nope'; configured: ['fake', 'other']")


async def test_health_ok_and_degraded(caller: Running) -> None:
    """All probes pass: ok; upstream discovery 5xx: degraded with details and coverage."""
    async with caller.session() as http:
        ok = await (await http.get("/health")).json()
        caller.fake.models_status = 503
        degraded = await (await http.get("/health")).json()
    assert ok["status"] == "ok"
    assert [c["name"] for c in ok["components"]] == [
        "transport", "orchestrator", "provider:fake", "provider:other"]
    assert all(isinstance(c["status"], str) and c["timestamp"] for c in ok["components"])
    assert degraded["status"] == "degraded"
    fake_component = degraded["components"][2]
    assert fake_component["details"] == "Model discovery returned HTTP 503"
    assert fake_component["capabilityCoverage"] == [
        {"capability": c, "status": "degraded"} for c in ("chat", "chatStream", "embed")]


async def test_health_failed_when_a_provider_is_unreachable(fake: FakeOpenAI) -> None:
    """A provider on a closed port fails its probe: overall failed."""
    dead = {"baseUrl": "http://127.0.0.1:9/v1", "defaultModel": "m", "capabilities": ["chat"]}
    async with run_caller(catalog(fake, dead=dead), fake) as caller:
        async with caller.session() as http:
            body = await (await http.get("/health")).json()
    assert body["status"] == "failed"
    assert body["components"][-1] == {**body["components"][-1], "name": "provider:dead",
                                      "status": "failed", "details": "Provider unreachable"}


# -- schema violations (check 14: the spec's 400, not the origin's 500) -----------------------


@pytest.mark.parametrize(("path", "body"), [
    ("/mcp/chat", chat_body(messages=[])),
    ("/mcp/chat", chat_body(messages=[{"role": "tool", "content": "x"}])),
    ("/mcp/chat", chat_body(extra=1)),
    ("/mcp/chat", chat_body(temperature=3)),
    ("/mcp/chat", chat_body(maxTokens=0)),
    ("/mcp/chat", {k: v for k, v in chat_body().items() if k != "requestId"}),
    ("/mcp/chat", [1, 2]),
    ("/mcp/embed", {"requestId": "e", "callerTool": "t", "inputs": []}),
    ("/mcp/embed", {"requestId": "e", "callerTool": "t", "inputs": ["x"], "provider": "fake"}),
])
async def test_schema_violation_is_400(caller: Running, path: str, body: object) -> None:
    """Each schema violation: 400 BAD_REQUEST "Schema validation failed: ..."."""
    async with caller.session() as http:
        resp = await http.post(path, json=body)
        answer = await resp.json()
    assert resp.status == 400 and answer["error"] == "BAD_REQUEST"
    assert answer["message"].startswith("Schema validation failed: ")
    assert "Traceback" not in answer["message"]


async def test_non_json_body_is_400(caller: Running) -> None:
    """A body that is not JSON: 400 BAD_REQUEST, never a traceback."""
    async with caller.session() as http:
        resp = await http.post("/mcp/chat", data=b"{not json",
                               headers={"Content-Type": "application/json"})
        body = await resp.json()
    assert resp.status == 400
    assert body["message"] == "Request body is not valid JSON"


async def test_oversized_body_is_400(fake: FakeOpenAI) -> None:
    """A body over the limit is refused with 400 before it is parsed."""
    async with run_caller(catalog(fake), fake, max_body_bytes=1024) as caller:
        async with caller.session() as http:
            resp = await http.post("/mcp/chat", json=chat_body(pad="x" * 2048))
            body = await resp.json()
    assert resp.status == 400 and body["message"] == "Request body too large"
    assert fake.requests == []


async def test_unknown_route_and_method(caller: Running) -> None:
    """Unknown paths are JSON 404s; a GET on a POST route is a JSON 405."""
    async with caller.session() as http:
        missing = await http.get("/mcp/health")
        wrong = await http.get("/mcp/chat")
        codes = (await missing.json())["error"], (await wrong.json())["error"]
    assert (missing.status, wrong.status) == (404, 405)
    assert codes == ("NOT_FOUND", "METHOD_NOT_ALLOWED")


async def test_published_schema_route(caller: Running) -> None:
    """GET /mcp/schemas/v1/chat_request.schema.json serves the published schema."""
    async with caller.session(token=None) as http:
        resp = await http.get("/mcp/schemas/v1/chat_request.schema.json")
        body = await resp.json(content_type=None)
    assert resp.status == 200 and body == load_schema("chat_request")


def test_registry_fixture_is_what_tests_assume() -> None:
    """The test registry grants the limited client chat only."""
    client = registry().lookup(LIMITED_TOKEN)
    assert client is not None and client.allowed_methods == frozenset({"chat"})
