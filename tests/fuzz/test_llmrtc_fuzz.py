"""Property tests: random and mutated llmrtc frames, first at the sans-I/O parser, then at the
real WebSocket edge. Whatever arrives, the answer is a valid message or ``error`` with a code of
the spec ("Error Codes"), never a traceback, and the connection keeps serving."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.integration.conftest import ws_url
from voice_server.config import load_settings
from voice_server.protocol import ErrorCode
from voice_server.protocol.codec import ProtocolError, UnknownMessage, parse_client
from voice_server.protocol.messages import Message
from voice_server.server.app import VoiceServer

CODES = {code.value for code in ErrorCode}
TEMPLATES: list[dict[str, Any]] = [
    {"type": "ping", "timestamp": 1},
    {"type": "offer", "signal": {"type": "offer", "sdp": "v=0\r\n"}},
    {"type": "reconnect", "sessionId": "01HZZZZZZZZZZZZZZZZZZZZZZZ"},
    {"type": "audio", "data": base64.b64encode(b"RIFF....WAVEfmt ").decode()},
    {"type": "attachments", "attachments": [{"data": "data:image/png;base64,AAAA"}]},
    {"type": "signal", "signal": {"type": "answer", "sdp": ""}},
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=12)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid-looking message with keys dropped, replaced or added."""
    msg = json.loads(json.dumps(draw(st.sampled_from(TEMPLATES))))
    for key in draw(st.lists(st.sampled_from(sorted(msg)), max_size=2, unique=True)):
        if draw(st.booleans()):
            msg.pop(key)
        else:
            msg[key] = draw(json_values)
    msg.update(draw(st.dictionaries(st.text(max_size=10), json_values, max_size=2)))
    return json.dumps(msg)


frames = (st.binary(max_size=300) | st.text(max_size=300) | mutated()
          | json_values.map(json.dumps)
          | st.sampled_from(['{"type": "ping"', "[" * 5000, '{"type": "' + "x" * 5000 + '"}',
                             '{"type": "ping", "timestamp": NaN}', '{"type":"ping"}' * 3]))


@given(frames)
@settings(max_examples=400, deadline=None)
def test_the_parser_accepts_or_answers_a_spec_code(frame: str | bytes) -> None:
    try:
        parsed = parse_client(frame)
    except ProtocolError as exc:
        assert exc.code.value in CODES and str(exc)
        assert "Traceback" not in str(exc)
    else:
        assert isinstance(parsed, Message | UnknownMessage)


@pytest.fixture(scope="module")
def edge_url() -> Iterator[str]:
    """A real server on its own thread and loop (hypothesis drives it from synchronous tests
    through a blocking client). No models: nothing a fuzzed frame carries is valid speech."""
    holder: dict[str, Any] = {}
    ready = threading.Event()

    async def serve() -> None:
        holder["stop"] = asyncio.Event()
        holder["loop"] = asyncio.get_running_loop()
        config = load_settings(port=0, preload_models=False, max_messages_per_s=10_000,
                               message_burst=10_000, max_message_bytes=64 * 1024)
        async with VoiceServer(config) as server:
            holder["url"] = ws_url(server)
            ready.set()
            await holder["stop"].wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="fuzz-server",
                              daemon=True)
    thread.start()
    assert ready.wait(60), "the server did not start"
    yield holder["url"]
    holder["loop"].call_soon_threadsafe(holder["stop"].set)
    thread.join(30)


def round_trip(ws: ClientConnection, frame: str | bytes, stamp: int) -> list[dict[str, Any]]:
    """Send ``frame`` then a ping; return what came back before the matching pong."""
    ws.send(frame)
    ws.send(json.dumps({"type": "ping", "timestamp": stamp}))
    seen = []
    while True:
        msg = json.loads(ws.recv(timeout=10))
        if msg == {"type": "pong", "timestamp": stamp}:
            return seen
        seen.append(msg)


def test_the_websocket_edge_survives_fuzzed_frames(edge_url: str) -> None:
    stamp = [0]
    with connect(edge_url) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"

        @given(frame=frames)
        @settings(max_examples=200, deadline=None)
        def check(frame: str | bytes) -> None:
            stamp[0] += 1
            for reply in round_trip(ws, frame, stamp[0]):
                assert "Traceback" not in json.dumps(reply)
                if reply["type"] == "error":
                    assert reply["code"] in CODES and reply["message"]

        check()
    with connect(edge_url) as other:  # a fresh client is served normally afterwards
        assert json.loads(other.recv(timeout=10))["type"] == "ready"
        assert round_trip(other, '{"type": "ping", "timestamp": 5}', 6) == [
            {"type": "pong", "timestamp": 5}]


def test_oversized_frames_close_only_their_connection(edge_url: str) -> None:
    with connect(edge_url) as bystander, connect(edge_url) as big:
        bystander.recv(timeout=10)
        big.recv(timeout=10)
        big.send("x" * (200 * 1024))  # over max_size (max_message_bytes + 64 KiB)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                big.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        assert round_trip(bystander, '{"type": "ping", "timestamp": 3}', 4) == [
            {"type": "pong", "timestamp": 3}]
