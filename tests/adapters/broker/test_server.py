"""The broker over real TCP on 127.0.0.1 (spec "Server semantics", and
the original's behaviour where the spec is silent)."""

from __future__ import annotations

import asyncio
import json
import random
import struct

import pytest

from tests.adapters.fakes import ProgrammableProvider, last_user_text
from tests.support.fake_openai import Reply
from voice_server.adapters.broker import (
    BrokerError,
    BrokerOptions,
    BrokerServer,
    BrokerService,
    encode_frame,
    request_completion,
    request_completions_batched,
    send_request,
)
from voice_server.adapters.broker.codec import FrameDecoder
from voice_server.adapters.broker.messages import WireRequest
from voice_server.llm import LLMRouter, LLMUnavailable

TIMEOUT = 10.0


async def exchange(port: int, data: bytes, *, half_close: bool = True) -> list[dict]:
    """Send raw bytes, then read every response frame until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    if half_close:
        writer.write_eof()
    decoder = FrameDecoder()
    frames: list[bytes] = []
    async with asyncio.timeout(TIMEOUT):
        while chunk := await reader.read(65536):
            frames += decoder.feed(chunk)
    writer.close()
    return [json.loads(f) for f in frames]


def without_time(response: dict) -> dict:
    for result in response.get("results") or []:
        if result.get("chat_completion"):
            assert result["chat_completion"].pop("execution_time") >= 0
    return response


@pytest.fixture
async def broker(fake_router):
    service = BrokerService(fake_router, BrokerOptions(models={"alias": "fake/other-model"}))
    async with BrokerServer(service) as server:
        yield server


def prog_broker(provider: ProgrammableProvider) -> BrokerServer:
    return BrokerServer(BrokerService(LLMRouter({"prog": provider}, default="prog")))


async def test_single_prompt_exact_response(broker, fake_openai):
    """A single prompt gets one result with the full chat_completion, correlation id echoed."""
    fake_openai.add(Reply(text="Paris.", prompt_tokens=7, completion_tokens=2))
    frame = encode_frame({"correlation_id": "c-1", "prompt": "Capital of France?"})
    [response] = await exchange(broker.port, frame)
    assert without_time(response) == {
        "correlation_id": "c-1", "error": None,
        "results": [{"error": None, "chat_completion": {
            "root_model": "fake-model", "prompt": "Capital of France?", "response": "Paris.",
            "usage_summary": {"model_usage_summaries": {"fake-model": {
                "total_calls": 1, "total_input_tokens": 7, "total_output_tokens": 2}}},
            "prompt_tokens": 7, "completion_tokens": 2, "finish_reason": "stop"}}]}
    assert fake_openai.requests[-1]["messages"] == [
        {"role": "user", "content": "Capital of France?"}]


async def test_named_model_routes_and_names_root_model(broker, fake_openai):
    """A configured name goes to its model, and root_model is the resolved model name."""
    frame = encode_frame({"model": "alias", "prompt": [{"role": "user", "content": "hi"}]})
    [response] = await exchange(broker.port, frame)
    completion = response["results"][0]["chat_completion"]
    assert completion["root_model"] == "other-model"
    assert fake_openai.requests[-1]["model"] == "other-model"
    assert completion["response"] == "You said: hi"


async def test_unknown_model_single_is_item_error_batch_is_request_error(broker):
    """The origin's asymmetry: per-item for prompt, request-level for prompts."""
    [single] = await exchange(broker.port, encode_frame({"model": "nope", "prompt": "x"}))
    assert single["error"] is None
    assert single["results"] == [{"error": "Unknown model 'nope'. Allowed: ['alias', "
                                           "'fake-model']", "chat_completion": None}]
    [batch] = await exchange(broker.port, encode_frame({"model": "nope", "prompts": ["x"]}))
    assert batch["results"] is None and batch["error"].startswith("Unknown model 'nope'")


@pytest.mark.parametrize("model", [None, "", "   ", "fake-model"])
async def test_default_model_aliases(broker, model):
    """null, missing, blank or the default's own name all go to the default model."""
    [response] = await exchange(broker.port, encode_frame({"model": model, "prompt": "a"}))
    assert response["results"][0]["chat_completion"]["root_model"] == "fake-model"


async def test_batch_is_concurrent_and_ordered_with_uneven_latencies():
    """All items are in flight at once (a barrier) and results keep request order."""
    n = 6
    barrier = asyncio.Barrier(n)

    async def answer(request):
        text = last_user_text(request)
        await asyncio.wait_for(barrier.wait(), TIMEOUT)  # deadlocks unless concurrent
        await asyncio.sleep(0.01 * (n - int(text)))  # earlier items finish last
        return f"answer {text}"

    provider = ProgrammableProvider(answer)
    async with prog_broker(provider) as server:
        prompts = [str(i) for i in range(n)]
        [response] = await exchange(server.port, encode_frame({"prompts": prompts}))
    assert [r["chat_completion"]["response"] for r in response["results"]] == \
        [f"answer {i}" for i in range(n)]
    assert provider.max_in_flight == n


async def test_one_failing_item_is_an_item_error():
    """A failure in one batch item does not fail the request."""
    async def answer(request):
        if last_user_text(request) == "bad":
            raise LLMUnavailable("the LLM endpoint answered HTTP 503")
        return "fine"

    async with prog_broker(ProgrammableProvider(answer)) as server:
        [response] = await exchange(server.port, encode_frame(
            {"correlation_id": "b", "prompts": ["a", "bad", "c"]}))
    assert response["error"] is None and response["correlation_id"] == "b"
    assert [(r["error"], bool(r["chat_completion"])) for r in response["results"]] == [
        (None, True), ("the LLM endpoint answered HTTP 503", False), (None, True)]


async def test_upstream_http_error_is_item_error(broker, fake_openai):
    """An HTTP 500 from the OpenAI-compatible endpoint becomes the item's error."""
    fake_openai.add(Reply(status=500))
    [response] = await exchange(broker.port, encode_frame({"prompt": "x"}))
    assert response["results"] == [{"error": "the LLM endpoint answered HTTP 500",
                                    "chat_completion": None}]


async def test_strict_keys_and_bad_types_over_tcp(broker):
    """Legacy keys are refused; correlation ids are echoed only when they are strings."""
    [legacy] = await exchange(broker.port, encode_frame(
        {"correlation_id": "k", "prompt": "x", "depth": 1, "tools": []}))
    assert legacy == {"correlation_id": "k", "results": None,
                      "error": "Unknown keys in WireRequest: ['depth', 'tools']"}
    [bad_cid] = await exchange(broker.port, encode_frame({"correlation_id": 3, "prompt": "x"}))
    assert bad_cid == {"correlation_id": None, "results": None,
                       "error": "WireRequest.correlation_id must be a string"}


async def test_a_lone_surrogate_is_refused_before_any_model(broker, fake_openai):
    """A JSON escape can spell a lone surrogate; no provider can send it on (it is not
    UTF-8): a request-level error naming it, where the client got the codec's text."""
    payload = b'{"correlation_id":"s","prompts":["fine",[{"role":"user","content":"\\ud800"}]]}'
    [frame] = await exchange(broker.port, struct.pack(">I", len(payload)) + payload)
    assert frame == {"correlation_id": "s", "results": None, "error":
                     "WireRequest holds a string with a lone surrogate (not valid UTF-8)"}
    assert fake_openai.requests == []


@pytest.mark.parametrize(("payload", "error"), [
    (b"[1]", "Frame JSON must be an object"),
    (b"{nope", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    (b'{"prompt":"\xff"}', "'utf-8' codec can't decode byte 0xff in position 11: "
                           "invalid start byte"),
])
async def test_framing_errors_answer_one_error_frame(broker, payload, error):
    """Undecodable payloads get one error frame with a null correlation id."""
    frames = await exchange(broker.port, struct.pack(">I", len(payload)) + payload)
    assert frames == [{"correlation_id": None, "error": error, "results": None}]


async def test_oversize_prefix_answers_and_closes(broker):
    """An oversize prefix is answered without reading the payload, then the socket closes."""
    frames = await exchange(broker.port, struct.pack(">I", 10_000_001), half_close=False)
    assert frames == [{"correlation_id": None, "results": None,
                       "error": "Frame too large: 10000001 bytes (max 10000000)"}]


async def test_close_mid_frame_is_answered_as_the_origin_does_and_server_lives_on(broker):
    """A close inside the payload takes the connection-error path, as the original's does:
    one error frame to a client that half-closed; a close inside the prefix gets nothing. The
    next client is served."""
    frame = encode_frame({"prompt": "x"})
    assert await exchange(broker.port, frame[:-3]) == [
        {"correlation_id": None, "error": "Connection error", "results": None}]
    assert await exchange(broker.port, frame[:2]) == []
    [response] = await exchange(broker.port, frame)
    assert response["results"][0]["chat_completion"]["response"] == "You said: x"


async def test_frames_on_one_connection_are_answered_in_order(broker):
    """Several requests on one connection are answered in order (an extension of the origin)."""
    data = b"".join(encode_frame({"correlation_id": str(i), "prompt": f"p{i}"}) for i in range(3))
    responses = await exchange(broker.port, data)
    assert [(r["correlation_id"], r["results"][0]["chat_completion"]["response"])
            for r in responses] == [(str(i), f"You said: p{i}") for i in range(3)]


async def test_seeded_fuzz_over_tcp_never_crashes(broker):
    """Random payloads behind valid prefixes each get exactly one frame back (origin fuzz)."""
    rng = random.Random(0)
    for _ in range(25):
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        frames = await exchange(broker.port, struct.pack(">I", len(payload)) + payload)
        assert len(frames) == 1 and frames[0]["error"] and "Traceback" not in frames[0]["error"]
    [ok] = await exchange(broker.port, encode_frame({"prompt": "still alive"}))
    assert ok["results"][0]["chat_completion"]["response"] == "You said: still alive"


async def test_fifty_concurrent_clients():
    """50 clients at once each get their own answer."""
    provider = ProgrammableProvider()
    async with prog_broker(provider) as server:
        address = ("127.0.0.1", server.port)
        completions = await asyncio.gather(*(
            request_completion(address, f"client {i}", correlation_id=f"c{i}")
            for i in range(50)))
    assert [c.response for c in completions] == [f"echo: client {i}" for i in range(50)]
    assert server.connections == 0


async def test_client_helpers(broker, fake_openai):
    """The helpers return completions and per-item results, and raise BrokerError otherwise."""
    address = ("127.0.0.1", broker.port)
    completion = await request_completion(address, "one")
    assert (completion.response, completion.root_model) == ("You said: one", "fake-model")
    fake_openai.add("first", Reply(status=503))
    items = await request_completions_batched(address, ["a", "b"])
    assert sorted(i.text for i in items) == ["Error: the LLM endpoint answered HTTP 503", "first"]
    assert await request_completions_batched(address, []) == []
    with pytest.raises(BrokerError, match="Unknown model"):
        await request_completion(address, "x", model="nope")
    with pytest.raises(BrokerError, match="Unknown model"):
        await request_completions_batched(address, ["x"], model="nope")
    response = await send_request(address, WireRequest(prompts=["p"], correlation_id="z"))
    assert response.correlation_id == "z" and response.results[0].chat_completion


@pytest.mark.parametrize(("answer", "single", "batched"), [
    (b'{"correlation_id":null,"error":null,"results":null}',
     "expected exactly 1 result, got none", "Invalid broker response: missing results"),
    (b'{"correlation_id":null,"error":null,"results":[]}',
     "expected exactly 1 result, got 0", "expected 2 results, got 0"),
    (b'{"error":null,"results":[],"extra":1}', "Unknown keys", "Unknown keys"),
    (b"[]", "Frame JSON must be an object", "Frame JSON must be an object"),
    (b'{"error":"boom","results":null}', "^boom$", "^boom$"),
])
async def test_client_rejects_invalid_responses(answer, single, batched):
    """Responses that break the spec's invariants raise BrokerError with a clear reason."""
    async def respond(reader, writer):
        await reader.read(65536)
        writer.write(struct.pack(">I", len(answer)) + answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(respond, "127.0.0.1", 0)
    address = ("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        with pytest.raises(BrokerError, match=single):
            await request_completion(address, "x")
        with pytest.raises(BrokerError, match=batched):
            await request_completions_batched(address, ["x", "y"])
    finally:
        server.close()
        await server.wait_closed()


async def test_client_reports_transport_failures():
    """A refused connection and a server that closes without answering are BrokerErrors."""
    async def close_at_once(reader, writer):
        await reader.read(4)
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(BrokerError, match="Connection closed before response frame"):
            await request_completion(("127.0.0.1", port), "x")
    finally:
        server.close()
        await server.wait_closed()
    with pytest.raises(BrokerError, match="Connection error"):
        await request_completion(("127.0.0.1", port), "x")


async def test_close_is_idempotent_and_cancels_connections(fake_router):
    """Closing twice is safe, and an idle open connection is cancelled on close."""
    server = BrokerServer(BrokerService(fake_router))
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(encode_frame({"prompt": "keep me open"}))
    await writer.drain()
    decoder = FrameDecoder()
    async with asyncio.timeout(TIMEOUT):
        while not decoder.feed(await reader.read(65536)):
            pass
    assert server.connections == 1  # answered, and waiting for a next frame
    await server.close()
    await server.close()
    assert server.connections == 0
    try:
        assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""
    except ConnectionResetError:
        pass  # the kernel may reset instead of a clean FIN; either way the server hung up
    writer.close()


async def test_batch_timeout_is_a_request_level_error():
    """A batch slower than batch_timeout_s is answered "Request timed out", items cancelled."""
    gate = asyncio.Event()

    async def answer(request):
        await gate.wait()
        return "never"

    provider = ProgrammableProvider(answer)
    service = BrokerService(LLMRouter({"p": provider}, default="p"),
                            BrokerOptions(batch_timeout_s=0.2))
    async with BrokerServer(service) as server:
        [response] = await exchange(server.port, encode_frame(
            {"correlation_id": "t", "prompts": ["a", "b"]}))
    assert response == {"correlation_id": "t", "error": "Request timed out", "results": None}
    assert provider.in_flight == 0
