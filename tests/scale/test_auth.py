"""Optional auth (issue 9): HMAC tokens by query or first message, resume by the same principal
only, Origin checks, CORS on the JS client, TURN REST credentials in ready.iceServers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from http import HTTPStatus
from urllib.request import Request, urlopen

import pytest
import pytest_asyncio
import websockets

from tests.conftest import scaled
from tests.integration.conftest import ws_url
from voice_server.config import load_settings
from voice_server.metrics import session_tag
from voice_server.server.app import VoiceServer
from voice_server.server.auth import AuthError, TokenSigner, auth_message_token, query_token

SECRET = "test-secret-please-change"


@pytest_asyncio.fixture(scope="module")
async def auth_server() -> AsyncIterator[VoiceServer]:
    settings = load_settings(port=0, preload_models=False, auth_secret=SECRET,
                             auth_timeout_s=scaled(2), turn_secret="turn-secret",
                             turn_urls="turn:127.0.0.1:3478?transport=udp,turn:127.0.0.1:3478",
                             allowed_origins="https://app.example")
    async with VoiceServer(settings) as server:
        yield server


def token(sub: str = "alice", ttl: float = 300, secret: str = SECRET) -> str:
    return TokenSigner(secret).issue(sub, ttl)


async def refused(server: VoiceServer, *, query: str = "", first: str | None = None) -> dict:
    """Connect, optionally send a first message; expect an error then close 4401."""
    async with websockets.connect(ws_url(server) + (f"?{query}" if query else "")) as ws:
        if first is not None:
            await ws.send(first)
        err = json.loads(await ws.recv())
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
    assert err["type"] == "error" and err["code"] == "CONNECTION_FAILED"
    return err


def test_token_codec_rejects_tampering_and_expiry():
    now = [1000.0]
    signer = TokenSigner(SECRET, clock=lambda: now[0])
    good = signer.issue("alice", 60)
    assert signer.verify(good).subject == "alice"
    body, mac = good.split(".")
    forged_body = base64.urlsafe_b64encode(b'{"sub":"mallory","exp":99999}').rstrip(b"=")
    for bad in ("", "abc", f"{body}.{mac[:-2]}xx", f"{forged_body.decode()}.{mac}",
                TokenSigner("other").issue("alice", 60), "a.b.c", "é.é"):
        with pytest.raises(AuthError):
            signer.verify(bad)
    now[0] += 61
    with pytest.raises(AuthError, match="expired"):
        signer.verify(good)
    assert query_token("/ws?playbook=x&token=abc") == "abc"
    assert auth_message_token('{"type": "auth", "token": "t"}') == "t"
    assert auth_message_token('{"type": "ping"}') is None
    assert auth_message_token(b"\x00") is None


async def test_missing_expired_forged_tokens_are_rejected(auth_server):
    assert "required" in (await refused(auth_server, first='{"type": "ping", "timestamp": 1}'))[
        "message"]
    assert "expired" in (await refused(auth_server, query=f"token={token(ttl=-5)}"))["message"]
    assert "signature" in (await refused(auth_server,
                                         query=f"token={token(secret='wrong')}"))["message"]
    assert "malformed" in (await refused(
        auth_server, first=json.dumps({"type": "auth", "token": "not-a-token"})))["message"]
    # silence: the auth message never comes
    assert "in time" in (await refused(auth_server))["message"]


async def test_valid_token_by_query_or_first_message(auth_server, connect):
    async with connect(auth_server, query=f"token={token()}") as client:
        await client.send({"type": "ping", "timestamp": 1})
        assert (await client.recv())["type"] == "pong"
    async with websockets.connect(ws_url(auth_server)) as ws:
        await ws.send(json.dumps({"type": "auth", "token": token("bob")}))
        ready = json.loads(await ws.recv())
        assert ready["type"] == "ready"


async def test_resume_only_by_the_same_principal(auth_server, connect):
    async with connect(auth_server, query=f"token={token('alice')}") as alice:
        session_id = alice.ready["id"]
    async with connect(auth_server, query=f"token={token('mallory')}") as mallory:
        await mallory.send({"type": "reconnect", "sessionId": session_id})
        ack = await mallory.recv()
        assert ack["success"] is False and ack["sessionId"] == mallory.ready["id"]
    async with connect(auth_server, query=f"token={token('alice')}") as again:
        await again.send({"type": "reconnect", "sessionId": session_id})
        ack = await again.recv()
        assert ack == {"type": "reconnect-ack", "success": True, "sessionId": session_id,
                       "historyRecovered": True}


async def test_turn_credentials_in_ready(auth_server, connect):
    async with connect(auth_server, query=f"token={token()}") as client:
        ice = client.ready["iceServers"]
    assert len(ice) == 1
    entry = ice[0]
    assert entry["urls"] == ["turn:127.0.0.1:3478?transport=udp", "turn:127.0.0.1:3478"]
    expiry, user = entry["username"].split(":")
    # issue 20, item 10: the username lands in the TURN server's logs: never the session id
    assert user == session_tag(client.ready["id"]) and client.ready["id"] not in user
    assert 3500 < int(expiry) - time.time() <= 3600
    expected = base64.b64encode(hmac.new(b"turn-secret", entry["username"].encode(),
                                         hashlib.sha1).digest()).decode()
    assert entry["credential"] == expected


async def test_origin_check_and_cors(auth_server):
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(ws_url(auth_server) + f"?token={token()}",
                                      origin="https://evil.example"):
            pass
    assert info.value.response.status_code == HTTPStatus.FORBIDDEN
    async with websockets.connect(ws_url(auth_server) + f"?token={token()}",
                                  origin="https://app.example") as ws:
        assert json.loads(await ws.recv())["type"] == "ready"
    url = f"http://127.0.0.1:{auth_server.port}/client/llmrtc.js"
    import asyncio

    def fetch():
        with urlopen(Request(url, headers={"Origin": "https://other.example"}),
                     timeout=10) as resp:
            return resp.status, resp.headers.get("Access-Control-Allow-Origin")

    status, allow = await asyncio.to_thread(fetch)
    assert status == 200 and allow == "*"


async def test_metrics_and_health_details_need_a_token_when_auth_is_on(auth_server):
    """Issue 20, bug 5: /metrics was public with auth on, and /health showed everyone its
    details. Without a token: /metrics is 401, /health the status only; with one, both."""
    import asyncio
    from urllib.error import HTTPError

    base = f"http://127.0.0.1:{auth_server.port}"

    def fetch(path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        try:
            with urlopen(Request(base + path, headers=headers or {}), timeout=10) as resp:
                return resp.status, resp.read()
        except HTTPError as exc:
            return exc.code, exc.read()

    assert (await asyncio.to_thread(fetch, "/metrics"))[0] == HTTPStatus.UNAUTHORIZED
    forged = {"Authorization": "Bearer " + token(secret="another-secret")}
    assert (await asyncio.to_thread(fetch, "/metrics", forged))[0] == HTTPStatus.UNAUTHORIZED
    status, body = await asyncio.to_thread(
        fetch, "/metrics", {"Authorization": f"Bearer {token()}"})
    assert status == 200 and b"# TYPE voice_turn_seconds" in body
    status, body = await asyncio.to_thread(fetch, "/health")
    assert set(json.loads(body)) == {"status"}  # even from this machine, without a token
    status, body = await asyncio.to_thread(fetch, f"/health?token={token()}")
    assert {"status", "models", "version"} <= set(json.loads(body))
