"""Limits and backpressure (issue 9): sessions per instance and per IP, message rate, utterance
length, attachment bytes, a client that stops reading. Each limit answers its error and the
server stays healthy for everyone else."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio
import websockets

from tests.integration.conftest import ws_url
from voice_server.config import load_settings
from voice_server.pipeline.audio import wav_bytes
from voice_server.protocol import Transcript
from voice_server.server.app import VoiceServer
from voice_server.server.limits import Admission, TokenBucket


@pytest_asyncio.fixture(scope="module")
async def tight() -> AsyncIterator[VoiceServer]:
    settings = load_settings(port=0, preload_models=False, max_sessions=3, max_sessions_per_ip=2,
                             max_messages_per_s=5, message_burst=10, send_timeout_s=1.0,
                             max_audio_seconds=1.0, max_attachment_bytes=1000)
    async with VoiceServer(settings) as server:
        yield server


async def healthy(server: VoiceServer, connect) -> None:
    """Another client still gets served."""
    async with connect(server, local_addr=("127.0.0.9", 0)) as other:
        await other.send({"type": "ping", "timestamp": 7})
        assert await other.recv() == {"type": "pong", "timestamp": 7}


def test_token_bucket_and_admission_units():
    now = [0.0]
    bucket = TokenBucket(2.0, 3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.5
    assert bucket.take() and not bucket.take()
    adm = Admission(max_total=2, max_per_ip=1)
    assert adm.admit("a") is None and "address" in adm.admit("a")
    assert adm.admit("b") is None and "full" in adm.admit("c")
    adm.release("a")
    adm.release("a")  # double release is harmless
    assert adm.total == 1 and adm.admit("c") is None


async def refused_with(url: str, **kw) -> tuple[dict, int]:
    async with websockets.connect(url, **kw) as ws:
        err = json.loads(await ws.recv())
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    return err, closed.value.rcvd.code


async def test_sessions_per_ip_and_per_instance(tight, connect):
    async with connect(tight) as one, connect(tight) as two:
        err, code = await refused_with(ws_url(tight))
        assert err["code"] == "RATE_LIMITED" and "address" in err["message"] and code == 1013
        async with connect(tight, local_addr=("127.0.0.2", 0)):
            err, code = await refused_with(ws_url(tight), local_addr=("127.0.0.3", 0))
            assert err["code"] == "RATE_LIMITED" and "full" in err["message"] and code == 1013
        for client in (one, two):
            await client.send({"type": "ping", "timestamp": 1})
            assert (await client.recv())["type"] == "pong"
    await healthy(tight, connect)


async def test_message_rate(tight, connect):
    async with connect(tight) as client:
        for i in range(40):
            await client.send({"type": "ping", "timestamp": i})
        got = [await client.recv() for _ in range(11)]
        pongs = [m for m in got if m["type"] == "pong"]
        errors = [m for m in got if m["type"] == "error"]
        assert len(pongs) == 10 and [m["timestamp"] for m in pongs] == list(range(10))
        assert len(errors) == 1 and errors[0]["code"] == "RATE_LIMITED"  # one notice, not 30
        await healthy(tight, connect)


async def test_utterance_and_attachment_limits(tight, connect):
    long_wav = wav_bytes(np.zeros(16000 * 2, dtype=np.int16), 16000)
    async with connect(tight, local_addr=("127.0.0.4", 0)) as client:
        await client.send({"type": "audio", "data": base64.b64encode(long_wav).decode()})
        err = await client.recv()
        assert err["code"] == "INVALID_AUDIO_FORMAT" and "limit" in err["message"]
        image = base64.b64encode(b"\xff\xd8" + b"x" * 900).decode()
        await client.send({"type": "attachments", "attachments": [
            {"type": "image", "data": image, "mimeType": "image/jpeg"}]})
        err = await client.recv()
        assert err["code"] == "INVALID_MESSAGE" and "1000 bytes" in err["message"]
        await client.send({"type": "ping", "timestamp": 3})
        assert (await client.recv())["type"] == "pong"


async def test_client_that_stops_reading_is_dropped(tight):
    """A client that never reads: the server's write buffer stays bounded and the connection is
    dropped after send_timeout_s instead of queueing without end."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind(("127.0.0.5", 0))
    sock.connect(("127.0.0.1", tight.port))
    async with websockets.connect(ws_url(tight), sock=sock, max_queue=1, close_timeout=0.5,
                                  max_size=None) as ws:
        ready = json.loads(await ws.recv())
        conn = tight.live[ready["id"]]
        before = tight.metrics.errors.labels("SLOW_CLIENT")._value.get()
        big = Transcript(text="x" * 200_000, is_final=False)
        high = 0
        for _ in range(100):  # up to 20 MB if nothing pushed back
            await conn.send(big)
            high = max(high, conn.ws.transport.get_write_buffer_size())
            if conn.ws.transport.is_closing():
                break
        assert conn.ws.transport.is_closing()
        assert tight.metrics.errors.labels("SLOW_CLIENT")._value.get() == before + 1
        assert high < 2_000_000  # bounded by the write limit plus one message


def test_ipv6_clients_are_counted_by_their_64():
    """Issue 20, item 13: each IPv6 address counted alone, so one host (which owns a whole /64)
    could open any number of sessions. A /64 is one client; IPv4-mapped addresses are IPv4."""
    from voice_server.server.limits import Admission, address_group

    assert address_group("2001:db8:1:2:aaaa::1") == address_group("2001:db8:1:2:ffff::9") \
        == "2001:db8:1:2::/64"
    assert address_group("2001:db8:1:3::1") != address_group("2001:db8:1:2::1")
    assert address_group("::ffff:198.51.100.7") == "198.51.100.7"
    assert address_group("198.51.100.7") == "198.51.100.7"
    admission = Admission(max_total=100, max_per_ip=2)
    assert admission.admit("2001:db8:1:2::1") is None
    assert admission.admit("2001:db8:1:2::2") is None
    assert "too many" in admission.admit("2001:db8:1:2:dead:beef::3")
    assert admission.admit("2001:db8:1:3::1") is None  # another /64
    admission.release("2001:db8:1:2::2")
    assert admission.admit("2001:db8:1:2::99") is None


def test_the_default_message_size_is_sized_from_what_a_message_carries():
    """Issue 20, item 9: 60 s of 16 kHz mono WAV plus a turn's images, in base64, and not the
    old 16 MB (32 MB frames)."""
    s = load_settings()
    wav_b64 = 4 * -(-(44 + 60 * 16000 * 2) // 3)
    assert wav_b64 + s.max_attachment_bytes <= s.max_message_bytes < 8 * 1024 * 1024


async def test_input_over_the_server_memory_budget_gets_a_clear_error(connect):
    """Images held by all connections count against one budget: over it, new input is refused
    RATE_LIMITED (and the connection stays usable); when their holder leaves, it is accepted."""
    settings = load_settings(port=0, preload_models=False, input_budget_bytes=1_500_000,
                             max_attachment_bytes=700_000)
    image = base64.b64encode(b"\xff\xd8" + b"x" * 450_000).decode()  # 600 KB as sent
    frame = {"type": "attachments", "attachments": [
        {"type": "image", "data": image, "mimeType": "image/jpeg"}]}
    async with VoiceServer(settings) as server:
        async with connect(server) as holder:
            await holder.send(frame)
            await holder.send({"type": "ping", "timestamp": 1})
            assert (await holder.recv())["type"] == "pong"  # held, no error
            assert server.input_budget.in_use == len(image)
            async with connect(server) as other:
                await other.send(frame)
                err = await other.recv()
                assert err["code"] == "RATE_LIMITED" and "memory budget" in err["message"]
                await other.send({"type": "ping", "timestamp": 2})
                assert (await other.recv())["type"] == "pong"
        async with connect(server) as later:
            await later.send(frame)
            await later.send({"type": "ping", "timestamp": 3})
            assert (await later.recv())["type"] == "pong"
        # every byte is given back: the images' turn never came, their connections closed
        for _ in range(50):
            if server.input_budget.in_use == 0:
                break
            await asyncio.sleep(0.02)
        assert server.input_budget.in_use == 0
