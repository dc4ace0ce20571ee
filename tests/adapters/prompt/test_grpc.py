"""gRPC with a JSON codec on the second port: a grpcio client and raw HTTP/2 frames."""

from __future__ import annotations

import json
import re

import grpc
import pytest

from tests.support.fake_openai import Reply

from .h2client import decode_grpc_frame, encode_grpc_frame, h2_call

RUN = "/prompt.v1.PromptService/Run"


@pytest.fixture
async def run(sidecar):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.grpc_port}") as channel:
        yield channel.unary_unary(RUN, request_serializer=lambda o: json.dumps(o).encode(),
                                  response_deserializer=json.loads)


async def test_grpcio_client_run(run, fake):
    """A grpcio client gets the canonical response with real usage."""
    fake.add(Reply(text="hi from grpc", prompt_tokens=4, completion_tokens=3))
    resp = await run({"tool_name": "echo", "input": "hello"}, timeout=10)
    assert re.match(r"^[0-9A-HJKMNP-TV-Z]{26}$", resp["id"])
    assert (resp["object"], resp["model"], resp["output"], resp["usage"]) == (
        "response", "fake-model", [{"type": "output_text", "text": "hi from grpc"}],
        {"input_tokens": 4, "output_tokens": 3, "total_tokens": 7})
    assert fake.requests[-1]["messages"][-1]["content"] == "hello"


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"input": "x"}, grpc.StatusCode.INVALID_ARGUMENT, "tool_name is required"),
    ({"tool_name": "nope"}, grpc.StatusCode.NOT_FOUND, "tool not found"),
    ([1], grpc.StatusCode.INVALID_ARGUMENT, "invalid JSON body"),
])
async def test_grpcio_errors(run, body, status, message):
    """Errors carry the matching status numbers (those the original sends) and our message."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await run(body, timeout=10)
    assert (info.value.code(), info.value.details()) == (status, message)


async def test_grpcio_provider_failure_mapped(run, fake):
    """An upstream 429 is RESOURCE_EXHAUSTED without the upstream's text."""
    fake.add(Reply(status=429, error_message="DRIVER-DETAIL"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await run({"tool_name": "echo", "input": "x"}, timeout=10)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "DRIVER-DETAIL" not in info.value.details()


async def test_grpcio_deadline(run, fake):
    """A client deadline shorter than the model ends the call with DEADLINE_EXCEEDED."""
    fake.add(Reply(text="late", delay_s=0.5))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await run({"tool_name": "echo", "input": "x"}, timeout=0.05)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_unknown_method_unimplemented(sidecar):
    """An unknown method is UNIMPLEMENTED."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.grpc_port}") as channel:
        other = channel.unary_unary("/prompt.v1.PromptService/Other")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await other(b"{}", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_raw_grpc_json_frames(sidecar, fake):
    """application/grpc+json, te: trailers, one framed message; grpc-status 0 (check 11)."""
    fake.add(Reply(text="framed"))
    body = encode_grpc_frame(json.dumps({"tool_name": "echo", "input": "x"}).encode())
    resp = await h2_call(sidecar.grpc_port, RUN, body)
    assert resp.headers[":status"] == "200"
    assert resp.headers["content-type"].startswith("application/grpc")
    assert resp.status["grpc-status"] == "0"
    message, rest = decode_grpc_frame(resp.data)
    assert rest == b""
    assert json.loads(message)["output"] == [{"type": "output_text", "text": "framed"}]


async def test_raw_grpc_error_trailers(sidecar):
    """An error is a non-zero grpc-status with grpc-message, no message (check 11)."""
    resp = await h2_call(sidecar.grpc_port, RUN, encode_grpc_frame(b'{"input":"x"}'))
    assert resp.data == b""
    assert resp.status == {"grpc-status": "3", "grpc-message": "tool_name is required"}


async def test_raw_compressed_flag_rejected(sidecar, fake):
    """A compressed flag without grpc-encoding is rejected and never reaches the model
    (check 12)."""
    body = encode_grpc_frame(b'{"tool_name":"echo","input":"x"}', compressed=True)
    resp = await h2_call(sidecar.grpc_port, RUN, body)
    assert resp.status["grpc-status"] == "13"  # INTERNAL, as the origin's grpc-go answers
    assert fake.requests == []


async def test_raw_incomplete_message_rejected(sidecar, fake):
    """A declared length longer than the bytes sent never reaches the model (check 12).

    grpcio's core waits for the rest of the message until the call's deadline, so the client
    sends one (``grpc-timeout``) and gets DEADLINE_EXCEEDED."""
    body = encode_grpc_frame(b'{"tool_name":"echo","input":"x"}')[:-3]
    resp = await h2_call(sidecar.grpc_port, RUN, body, extra_headers=[("grpc-timeout", "100m")])
    assert resp.status["grpc-status"] == "4"
    assert fake.requests == []


def test_every_connect_code_has_its_grpc_status():
    """Each code the service can raise aborts a gRPC call with the status of the same number
    ("canceled" is grpcio's CANCELLED)."""
    from voice_server.adapters.prompt.errors import CONNECT_HTTP_STATUS, PromptError
    from voice_server.adapters.prompt.server import _grpc_code

    # the Connect codes are listed in the gRPC status numbers' order, from 1 ("canceled")
    for number, code in enumerate(CONNECT_HTTP_STATUS, start=1):
        assert _grpc_code(PromptError("x", code=code)).value[0] == number
