"""The bundled page and llmrtc.js over real WebRTC: headless Chromium against an aiortc peer.

The peer is a scripted llmrtc v1 server (aiohttp WebSocket signaling + aiortc), not
voice_server's pipeline: it checks the client's side of the protocol in a real browser —
non-trickle offer with a data channel, re-offer when the mic starts, mic audio arriving, the
agent's audio track playing, messages sent on both channels shown once, and a reconnect that
resumes the session before re-offering and re-attaching the mic.

It runs only in a private network namespace (loopback is the only network): ``make test`` runs
pytest under ``unshare -n``, and ``test_netns.py`` re-runs this file there otherwise.
"""

from __future__ import annotations

import asyncio
import fractions
import json
import math
import struct
import time
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import aioice.ice
import av
import numpy as np
import pytest_asyncio
from aiohttp import web
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamTrack

from tests.conftest import scaled
from tests.web.conftest import (
    INBOUND_AUDIO,
    ROOT,
    launch_chromium,
    needs_chromium,
    needs_netns,
    screenshot_path,
    static_routes,
)

WEB = ROOT / "web_client"
TIMEOUT = scaled(15.0)
STATIC_ROUTES = static_routes()  # the page's files and the client's modules
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css"}

pytestmark = [needs_chromium, needs_netns]


def tone_wav(path: Path) -> Path:
    """48 kHz mono: 0.4 s silence then 1 s of 330 Hz (the fake mic loops it)."""
    rate = 48000
    samples = [0.0] * int(0.4 * rate)
    samples += [0.3 * math.sin(2 * math.pi * 330 * i / rate) for i in range(rate)]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(s * 32767)) for s in samples))
    return path


class ScriptedPeer:
    """llmrtc v1 signaling over aiohttp + one aiortc RTCPeerConnection per WebSocket."""

    def __init__(self) -> None:
        self.web = web
        self.connections: asyncio.Queue = asyncio.Queue()
        self.url = ""
        self._tasks: set[asyncio.Task] = set()
        self._pcs: list = []

    async def index(self, request):
        return self.web.FileResponse(WEB / "index.html", headers={"Content-Type": "text/html"})

    async def client_file(self, request):
        path = WEB / STATIC_ROUTES[request.path]
        return self.web.FileResponse(path, headers={"Content-Type": CONTENT_TYPES[path.suffix]})

    async def ws(self, request):
        ws = self.web.WebSocketResponse()
        await ws.prepare(request)
        conn = Conn(ws)
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self._pcs.append(pc)
        conn.pc = pc

        @pc.on("datachannel")
        def on_datachannel(channel) -> None:
            conn.channel = channel
            if channel.readyState == "open":
                conn.channel_open.set()
            channel.on("open", conn.channel_open.set)

        @pc.on("track")
        def on_track(track) -> None:
            if track.kind != "audio":
                return
            pc.addTrack(ToneTrack())
            task = asyncio.create_task(conn.listen(track), name="webrtc-test-mic-reader")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        await ws.send_json({"type": "ready", "id": f"sess-{id(conn)}", "protocolVersion": 1,
                            "iceServers": []})
        await self.connections.put(conn)
        async for msg in ws:
            data = json.loads(msg.data)
            conn.received.append(data)
            conn.changed.set()
            if data["type"] == "offer":
                await pc.setRemoteDescription(RTCSessionDescription(**data["signal"]))
                await pc.setLocalDescription(await pc.createAnswer())
                local = pc.localDescription
                await ws.send_json({"type": "signal",
                                    "signal": {"type": local.type, "sdp": local.sdp}})
                conn.offers += 1
            elif data["type"] == "reconnect":
                await ws.send_json({"type": "reconnect-ack", "success": True,
                                    "sessionId": data["sessionId"], "historyRecovered": True})
            elif data["type"] == "ping":
                await ws.send_json({"type": "pong", "timestamp": data["timestamp"]})
        return ws

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for pc in self._pcs:
            await pc.close()


class Conn:
    def __init__(self, ws) -> None:
        self.ws = ws
        self.pc = None
        self.channel = None
        self.channel_open = asyncio.Event()
        self.mic_heard = asyncio.Event()
        self.received: list[dict] = []
        self.changed = asyncio.Event()
        self.offers = 0

    async def listen(self, track) -> None:
        """Read the browser's mic track; set ``mic_heard`` on the first loud frame."""
        while True:
            frame = await track.recv()
            pcm = frame.to_ndarray().astype(np.float32) / 32768.0
            if float(np.sqrt(np.mean(pcm**2))) > 0.02:
                self.mic_heard.set()

    async def both(self, msg: dict) -> None:
        """Send a payload on the data channel and on the WebSocket (spec: Transport Channels)."""
        text = json.dumps(msg)
        self.channel.send(text)
        await self.ws.send_str(text)

    async def wait_for(self, pred) -> dict:
        async with asyncio.timeout(TIMEOUT):
            while True:
                for m in self.received:
                    if pred(m):
                        return m
                self.changed.clear()
                await self.changed.wait()


class ToneTrack(MediaStreamTrack):
    """The agent's voice: a 440 Hz tone in 20 ms frames, paced by the media clock."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._start: float | None = None
        self._pts = 0

    async def recv(self) -> av.AudioFrame:
        if self._start is None:
            self._start = time.monotonic()
        delay = self._start + self._pts / 48000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # media pacing, not waiting for an event
        t = (np.arange(960) + self._pts) / 48000
        samples = (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 48000
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, 48000)
        self._pts += 960
        return frame


@pytest_asyncio.fixture
async def peer(monkeypatch) -> AsyncIterator[ScriptedPeer]:
    # aioice leaves out loopback addresses; in the namespace loopback is all there is
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: ["127.0.0.1"])
    fake = ScriptedPeer()
    app = web.Application()
    app.router.add_get("/", fake.index)
    for route in STATIC_ROUTES:
        app.router.add_get(route, fake.client_file)
    app.router.add_get("/ws", fake.ws)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.url = f"http://127.0.0.1:{port}/"
    try:
        yield fake
    finally:
        await fake.close()
        await runner.cleanup()


@pytest_asyncio.fixture
async def page(tmp_path: Path) -> AsyncIterator:
    from playwright.async_api import async_playwright

    mic = tone_wav(tmp_path / "mic48k.wav")
    async with async_playwright() as pw:
        browser = await launch_chromium(pw, mic, loop=True)
        context = await browser.new_context(viewport={"width": 1200, "height": 760})
        p = await context.new_page()
        p.errors = []
        p.on("pageerror", lambda exc: p.errors.append(str(exc)))
        try:
            yield p
        finally:
            await context.close()
            await browser.close()


async def wait_js(page, expr: str) -> None:
    await page.wait_for_function(expr, timeout=TIMEOUT * 1000)


async def test_webrtc_talk_dedupe_audio_and_reconnect(peer: ScriptedPeer, page) -> None:
    """Offer with a data channel, mic re-offer, both-channel messages shown once, agent audio
    received, and a reconnect that resumes the session, re-offers and re-attaches the mic."""
    await page.goto(f"{peer.url}?echoCancellation=0")
    conn = await asyncio.wait_for(peer.connections.get(), TIMEOUT)
    first_offer = await conn.wait_for(lambda m: m["type"] == "offer")
    assert "m=application" in first_offer["signal"]["sdp"]
    assert "a=candidate" in first_offer["signal"]["sdp"], "non-trickle: candidates in the SDP"
    await asyncio.wait_for(conn.channel_open.wait(), TIMEOUT)
    assert conn.channel.label == "data"
    await page.wait_for_selector("#conn[data-state='connected']", timeout=TIMEOUT * 1000)
    assert await page.locator("#transport").inner_text() == "WebRTC"

    await page.click("#talk")
    await conn.wait_for(lambda m: m["type"] == "offer" and "m=audio" in m["signal"]["sdp"])
    await asyncio.wait_for(conn.mic_heard.wait(), TIMEOUT)

    for m in [{"type": "speech-start"}, {"type": "speech-end"},
              {"type": "transcript", "text": "Hello agent", "isFinal": True},
              {"type": "llm-chunk", "content": "Hello ", "done": False},
              {"type": "llm-chunk", "content": "there!", "done": True},
              {"type": "tts-start"}]:
        await conn.both(m)
    await wait_js(page, "document.querySelector('.bubble.agent.speaking') !== null")
    assert await page.locator(".bubble.user").all_inner_texts() == ["Hello agent"]
    assert await page.locator(".bubble.agent .text").all_inner_texts() == ["Hello there!"]
    await wait_js(page, f"({INBOUND_AUDIO})().then(s => s && s.packets > 20 && s.energy > 0)")
    await conn.both({"type": "tts-complete"})
    await page.screenshot(path=screenshot_path("page-webrtc.png"))

    # the server drops the WebSocket: the client resumes the session on a new one
    session = f"sess-{id(conn)}"
    await conn.ws.close()
    conn2 = await asyncio.wait_for(peer.connections.get(), TIMEOUT)
    resume = await conn2.wait_for(lambda m: True)
    assert resume == {"type": "reconnect", "sessionId": session}
    await conn2.wait_for(lambda m: m["type"] == "offer" and "m=audio" in m["signal"]["sdp"])
    types = [m["type"] for m in conn2.received  # the page also asks for turn figures
             if m["type"] not in ("ping", "turn-metrics-subscribe")]
    assert types[:3] == ["reconnect", "offer", "offer"]
    await asyncio.wait_for(conn2.mic_heard.wait(), TIMEOUT)
    await page.wait_for_selector("#conn[data-state='connected']", timeout=TIMEOUT * 1000)
    assert "conversation restored" in await page.locator("#timeline").inner_text()
    assert page.errors == []
