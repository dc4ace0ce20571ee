"""Per-IP limits behind a reverse proxy (``trusted_proxies``): X-Forwarded-For names the client
only when the TCP peer is a trusted proxy, and only its right-most untrusted hop counts."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import websockets

from tests.integration.conftest import ws_url
from voice_server.config import ConfigError, load_settings
from voice_server.server.app import VoiceServer
from voice_server.server.limits import client_address

TRUSTED = [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.0.0.0/8")]


def test_client_address_walks_forwarded_hops_from_the_right():
    assert client_address("127.0.0.1", "203.0.113.7", TRUSTED) == "203.0.113.7"
    # the client wrote "6.6.6.6" itself; the proxy appended the real address
    assert client_address("127.0.0.1", "6.6.6.6, 203.0.113.7", TRUSTED) == "203.0.113.7"
    assert client_address("127.0.0.1", "203.0.113.7, 10.1.2.3", TRUSTED) == "203.0.113.7"
    assert client_address("198.51.100.1", "203.0.113.7", TRUSTED) == "198.51.100.1"  # untrusted
    assert client_address("127.0.0.1", None, TRUSTED) == "127.0.0.1"
    assert client_address("127.0.0.1", "not-an-ip, 10.1.2.3", TRUSTED) == "10.1.2.3"
    assert client_address("127.0.0.1", "10.9.9.9", TRUSTED) == "10.9.9.9"  # all trusted
    assert client_address("127.0.0.1", "2001:db8::1", TRUSTED) == "2001:db8::1"


def test_bad_networks_are_a_settings_error():
    with pytest.raises(ConfigError, match="trusted_proxies"):
        load_settings(trusted_proxies="10.0.0.0/8,nonsense")
    assert load_settings(trusted_proxies="127.0.0.1, 10.0.0.0/8").trusted_proxies == [
        "127.0.0.1", "10.0.0.0/8"]


async def server_with(**kw) -> AsyncIterator[VoiceServer]:
    settings = load_settings(port=0, preload_models=False, max_sessions_per_ip=1, **kw)
    async with VoiceServer(settings) as server:
        yield server


@pytest_asyncio.fixture(scope="module")
async def behind_proxy() -> AsyncIterator[VoiceServer]:
    async for server in server_with(trusted_proxies="127.0.0.1"):
        yield server


@pytest_asyncio.fixture(scope="module")
async def direct() -> AsyncIterator[VoiceServer]:
    async for server in server_with():
        yield server


async def first_message(url: str, forwarded: str) -> tuple[dict, websockets.ClientConnection]:
    ws = await websockets.connect(url, additional_headers={"X-Forwarded-For": forwarded})
    return json.loads(await ws.recv()), ws


async def test_clients_behind_a_trusted_proxy_are_limited_one_by_one(behind_proxy):
    url = ws_url(behind_proxy)
    a, ws_a = await first_message(url, "203.0.113.1")
    b, ws_b = await first_message(url, "203.0.113.2")
    again, ws_c = await first_message(url, "6.6.6.6, 203.0.113.1")  # forged left hop ignored
    try:
        assert a["type"] == "ready" and b["type"] == "ready"
        assert again["type"] == "error" and again["code"] == "RATE_LIMITED"
    finally:
        for ws in (ws_a, ws_b, ws_c):
            await ws.close()


async def test_forwarded_headers_from_untrusted_peers_are_ignored(direct):
    url = ws_url(direct)
    a, ws_a = await first_message(url, "203.0.113.1")
    spoofed, ws_b = await first_message(url, "203.0.113.2")  # same real peer: 127.0.0.1
    try:
        assert a["type"] == "ready"
        assert spoofed["type"] == "error" and spoofed["code"] == "RATE_LIMITED"
    finally:
        await ws_a.close()
        await ws_b.close()
