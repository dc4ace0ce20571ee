"""HTTP routes on the signaling port: health, metrics, origin checks, 404s."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import websockets

from tests.integration.conftest import ws_url

pytestmark = pytest.mark.slow


def get(server, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def test_health_reports_each_model_and_store(scripted_server):
    """/health is JSON with the status of STT, TTS, the LLM providers and the session store."""
    import asyncio

    status, headers, body = await asyncio.to_thread(get, scripted_server, "/health")
    assert status == 200 and headers["Content-Type"] == "application/json"
    report = json.loads(body)
    assert report["status"] == "ok"
    assert report["models"]["stt"]["status"] == "ok"
    assert report["models"]["tts"]["status"] == "ok"
    assert report["models"]["llm"]["openai_compat"]["status"] == "ok"
    assert report["stores"]["sessions"]["kind"] == "memory"


async def test_metrics_expose_turn_timings(scripted_server):
    """/metrics is Prometheus text with the per-stage histograms."""
    import asyncio

    status, headers, body = await asyncio.to_thread(get, scripted_server, "/metrics")
    text = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    for name in ("voice_stt_seconds", "voice_llm_ttft_seconds", "voice_tts_first_audio_seconds",
                 "voice_turn_seconds", "voice_errors_total", "voice_sessions_active"):
        assert f"# TYPE {name}" in text


async def test_unknown_path_is_404_and_plain_get_on_ws_is_426(scripted_server):
    """Unknown paths are 404; a plain GET on /ws says it needs a WebSocket upgrade."""
    import asyncio

    assert (await asyncio.to_thread(get, scripted_server, "/nope"))[0] == 404
    assert (await asyncio.to_thread(get, scripted_server, "/ws"))[0] == 426


async def test_foreign_browser_origin_is_refused(scripted_server):
    """A browser page from a non-allowed origin cannot open the socket; localhost can."""
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(ws_url(scripted_server), origin="https://evil.example"):
            pass
    assert info.value.response.status_code == 403
    async with websockets.connect(ws_url(scripted_server),
                                  origin="http://localhost:3000") as ws:
        assert json.loads(await ws.recv())["type"] == "ready"


def raw_request(server, text: str) -> bytes:
    """A request written by hand (headers urllib or websockets would refuse to send)."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(text.replace("\n", "\r\n").encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if data.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in data:
                break  # an upgraded socket stays open
    return data


UPGRADE = ("GET /ws HTTP/1.1\nHost: 127.0.0.1\nUpgrade: websocket\nConnection: Upgrade\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13\n")


@pytest.mark.parametrize("origin", ["http://[::1", "http://host:port", "://", "no scheme",
                                    "http://"])
async def test_a_malformed_origin_is_refused_not_a_server_error(scripted_server, origin,
                                                                caplog):
    """Issue 20, bug 1: `Origin: http://[::1` made the upgrade answer 500 with a traceback.
    A malformed Origin is 403, logged as a WARNING that names the setting."""
    import asyncio

    answer = await asyncio.to_thread(raw_request, scripted_server,
                                     UPGRADE + f"Origin: {origin}\n\n")
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    assert "Traceback" not in caplog.text
    assert any("allowed_origins" in r.getMessage() for r in caplog.records)


async def test_the_page_s_own_origin_is_allowed_wherever_it_is_served(scripted_server):
    """Issue 20, bug 2: the bundled page served from the server's own host (a compose
    deployment's public name) connects, whatever allowed_origins lists."""
    import asyncio

    answer = await asyncio.to_thread(
        raw_request, scripted_server,
        UPGRADE.replace("Host: 127.0.0.1", "Host: voice.example:8443")
        + "Origin: https://voice.example:8443\n\n")
    assert answer.startswith(b"HTTP/1.1 101"), answer[:200]
    answer = await asyncio.to_thread(
        raw_request, scripted_server,
        UPGRADE.replace("Host: 127.0.0.1", "Host: voice.example:8443")
        + "Origin: https://other.example:8443\n\n")
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]


def get_from(server, path: str, origin: str) -> dict[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}",
                                     headers={"Origin": origin})
    with urllib.request.urlopen(request, timeout=10) as r:
        return dict(r.headers)


async def test_health_answers_cors_only_to_origins_the_websocket_allows(scripted_server):
    """Issue 22, item 4: a page whose WebSocket failed asks /health with CORS; an answer it
    may read means "refused for another reason", none means "this origin is not allowed"."""
    import asyncio

    allowed = await asyncio.to_thread(get_from, scripted_server, "/health",
                                      "http://localhost:5173")
    assert allowed["Access-Control-Allow-Origin"] == "http://localhost:5173"
    assert allowed["Vary"] == "Origin"
    foreign = await asyncio.to_thread(get_from, scripted_server, "/health",
                                      "https://evil.example")
    assert "Access-Control-Allow-Origin" not in foreign


async def test_head_gets_headers_without_a_body(scripted_server):
    """Issue 20, bug 5: `HEAD /health` sent a body."""
    import asyncio

    answer = await asyncio.to_thread(raw_request, scripted_server,
                                     "HEAD /health HTTP/1.1\nHost: 127.0.0.1\n\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: " in head
    assert body == b""


async def test_health_details_are_for_this_machine_only(scripted_server):
    """Issue 20, bug 5: anyone saw file paths and versions in /health. A client through a
    trusted proxy (for someone else) gets the status only; this machine gets the details."""
    import asyncio

    scripted_server.routes._trusted = [__import__("ipaddress").ip_network("127.0.0.0/8")]
    answer = await asyncio.to_thread(
        raw_request, scripted_server,
        "GET /health HTTP/1.1\nHost: x\nX-Forwarded-For: 203.0.113.9\n\n")
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {"status": "ok"}
    status, _, body = await asyncio.to_thread(get, scripted_server, "/health")
    assert status == 200 and "models" in json.loads(body)


def test_a_null_origin_passes_only_when_listed():
    """`Origin: null` (file:// pages, sandboxed iframes, which any site can make) is not covered
    by `*`; the default list names it for the page opened from a file."""
    from voice_server.server.http import origin_allowed

    assert not origin_allowed("null", ["*"])
    assert not origin_allowed("null", ["https://app.example"])
    assert origin_allowed("null", ["null"])
    assert origin_allowed("https://any.example", ["*"])
    assert not origin_allowed("http://[::1", ["*"])


async def test_health_answers_in_time_when_the_llm_endpoint_hangs(scripted_server, fake_llm):
    """Issue 20, item 12: an endpoint that accepts and never answers made /health hang, so a
    load balancer could not tell the server was alive. It answers within ~2 s, the endpoint
    `unknown` and the server `degraded`."""
    import asyncio
    import time

    fake_llm.models_delay_s = 8
    try:
        started = time.monotonic()
        status, _, body = await asyncio.to_thread(get, scripted_server, "/health")
        took = time.monotonic() - started
    finally:
        fake_llm.models_delay_s = 0
    report = json.loads(body)
    assert status == 200 and took < 5, took
    assert report["status"] == "degraded"
    assert report["models"]["llm"]["openai_compat"]["status"] == "unknown"
