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
