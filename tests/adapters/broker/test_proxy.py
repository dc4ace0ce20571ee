"""The broker's HTTP proxy (spec "Docker proxy expectations"; the original's
status codes)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from tests.adapters.fakes import ProgrammableProvider, last_user_text
from tests.support.fake_openai import Reply
from voice_server.adapters.broker import BrokerProxy, BrokerService
from voice_server.llm import LLMRouter, LLMUnavailable

TIMEOUT = 10.0


@pytest.fixture
async def proxy(fake_router):
    async with BrokerProxy(BrokerService(fake_router)) as running:
        yield running


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as session:
        yield session


async def post(http, url: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json()


async def raw_http(port: int, request: bytes) -> tuple[int, dict]:
    """One raw HTTP/1.1 exchange, for requests aiohttp's client would not send."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    async with asyncio.timeout(TIMEOUT):
        data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_single_query_and_recorded_call(proxy, http, fake_openai):
    """/llm_query answers {"response"} and records the call under its correlation id."""
    fake_openai.add(Reply(text="Hello there", prompt_tokens=3, completion_tokens=2))
    status, body = await post(http, proxy.url + "/llm_query",
                              {"prompt": "hi", "correlation_id": "run-1", "depth": 1})
    assert (status, body) == (200, {"response": "Hello there"})
    [call] = proxy.service.log.get("run-1")
    assert (call.root_model, call.prompt, call.response, call.prompt_tokens) == \
        ("fake-model", "hi", "Hello there", 3)
    async with http.get(proxy.url + "/llm_calls/run-1") as resp:
        listed = await resp.json()
    assert [c["response"] for c in listed["calls"]] == ["Hello there"]


async def test_empty_response_is_preserved(proxy, http, fake_openai):
    """An empty answer is "" (the origin's regression test)."""
    fake_openai.add(Reply(text=""))
    assert await post(http, proxy.url + "/llm_query", {"prompt": "x"}) == (200, {"response": ""})


async def test_batched_query_keeps_order_and_inlines_item_errors(http):
    """/llm_query_batched keeps order; failing items become "Error: ..." strings."""
    async def answer(request):
        text = last_user_text(request)
        if text == "b":
            raise LLMUnavailable("down")
        await asyncio.sleep(0.02 if text == "a" else 0)
        return text.upper()

    service = BrokerService(LLMRouter({"p": ProgrammableProvider(answer)}, default="p"))
    async with BrokerProxy(service) as proxy:
        status, body = await post(http, proxy.url + "/llm_query_batched",
                                  {"prompts": ["a", "b", "c"], "correlation_id": "r"})
        assert (status, body) == (200, {"responses": ["A", "Error: down", "C"]})
        assert [c.response for c in service.log.get("r")] == ["C", "A"]
        assert await post(http, proxy.url + "/llm_query_batched", {"prompts": []}) == \
            (200, {"responses": []})


@pytest.mark.parametrize(("path", "body", "error"), [
    ("/llm_query", {"prompt": 5}, "Invalid prompt"),
    ("/llm_query", {"model": "x"}, "Invalid prompt"),
    ("/llm_query_batched", {"prompts": "x"}, "Invalid prompts"),
    ("/llm_query", {"prompt": "x", "model": 3}, "Invalid model"),
    ("/llm_query", {"prompt": "x", "correlation_id": []}, "Invalid correlation_id"),
    ("/llm_query", {"prompt": "x", "model": "nope"},
     "Unknown model 'nope'. Allowed: ['fake-model']"),
    ("/llm_query_batched", {"prompts": ["x"], "model": "nope"},
     "Unknown model 'nope'. Allowed: ['fake-model']"),
])
async def test_logical_errors_are_http_200(proxy, http, path, body, error):
    """Every logical error is a 200 with {"error": ...}, as in the origin."""
    assert await post(http, proxy.url + path, body) == (200, {"error": error})


@pytest.mark.parametrize(("body", "error"), [
    (b"{not json", "Invalid JSON payload"),
    (b"\xff\xfe", "Invalid JSON payload"),
    (b"[1, 2]", "Request body must be a JSON object"),
    (b'{"prompt": "\\ud800"}', "Invalid JSON payload: a string holds a lone surrogate"),
])
async def test_bad_bodies_are_http_400(proxy, http, body, error):
    """Undecodable or non-object bodies are 400s."""
    assert await post(http, proxy.url + "/llm_query", body) == (400, {"error": error})


async def test_unknown_path_is_404(proxy, http):
    """Any other path is 404 {"error": "Not found"}."""
    assert await post(http, proxy.url + "/other", {"prompt": "x"}) == \
        (404, {"error": "Not found"})


async def test_content_length_rules(proxy):
    """Missing or zero Content-Length is refused with the origin's messages."""
    missing = (b"POST /llm_query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n")
    assert await raw_http(proxy.port, missing) == (400, {"error": "Missing Content-Length"})
    empty = b"POST /llm_query HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    assert await raw_http(proxy.port, empty) == (400, {"error": "Missing request body"})
