"""The bundled page in real headless Chromium (Debian's, through Playwright), against a tiny
server on 127.0.0.1 that serves ``web_client/`` like voice_server does (``/``, the page's
scripts and the client's modules from ``server/static.py``'s routes, ``/playbooks``) plus a
scripted llmrtc v1 peer on ``/ws`` that has no WebRTC, so the page uses the WebSocket path.
Screenshots go to ``artifacts/web/``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import struct
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import WSMsgType, web

from tests.support.netns import free_port
from tests.web.conftest import (
    ARTIFACTS,
    CHROMIUM,
    ROOT,
    embed_example,
    needs_chromium,
    serve_html,
    static_routes,
)

WEB = ROOT / "web_client"
TIMEOUT = 10.0 * float(os.environ.get("TEST_TIME_FACTOR", "1"))
STATIC_ROUTES = static_routes()  # the page's files and the client's modules
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}

pytestmark = needs_chromium
playwright_api = pytest.importorskip("playwright.async_api")


@dataclass
class FakeVoiceServer:
    """Static files + a scripted llmrtc peer; every accepted socket lands in ``sockets``."""

    playbooks: list | dict | None = None
    sockets: asyncio.Queue = field(default_factory=asyncio.Queue)
    received: list = field(default_factory=list)
    origins: list = field(default_factory=list)
    audio: asyncio.Queue = field(default_factory=asyncio.Queue)
    url: str = ""

    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(WEB / "index.html", headers={"Content-Type": "text/html"})

    async def client_file(self, request: web.Request) -> web.StreamResponse:
        path = WEB / STATIC_ROUTES[request.path]
        # module scripts from another origin are fetched in CORS mode
        return web.FileResponse(path, headers={"Content-Type": CONTENT_TYPES[path.suffix],
                                               "Access-Control-Allow-Origin": "*"})

    async def list_playbooks(self, request: web.Request) -> web.StreamResponse:
        if self.playbooks is None:
            raise web.HTTPNotFound()
        return web.json_response(self.playbooks)

    async def ws(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.origins.append(request.headers.get("Origin"))
        await ws.send_json({"type": "ready", "id": "sess-1", "protocolVersion": 1,
                            "iceServers": []})
        await self.sockets.put((ws, request.query.get("playbook")))
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            self.received.append(data)
            if data["type"] == "offer":
                await ws.send_json({"type": "error", "code": "WEBRTC_UNAVAILABLE",
                                    "message": "this server has no WebRTC"})
            elif data["type"] == "ping":
                await ws.send_json({"type": "pong", "timestamp": data["timestamp"]})
            elif data["type"] == "audio":
                await self.audio.put(data)
        return ws


@pytest_asyncio.fixture
async def server() -> AsyncIterator[FakeVoiceServer]:
    fake = FakeVoiceServer()
    app = web.Application()
    app.router.add_get("/", fake.index)
    for route in STATIC_ROUTES:
        app.router.add_get(route, fake.client_file)
    app.router.add_get("/playbooks", fake.list_playbooks)
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
        await runner.cleanup()


def tone_wav(path: Path) -> Path:
    """48 kHz mono: 0.6 s silence, 0.9 s of a 440 Hz tone, 1.6 s silence (a fake utterance)."""
    rate = 48000
    samples = [0.0] * int(0.6 * rate)
    samples += [0.3 * math.sin(2 * math.pi * 440 * i / rate) for i in range(int(0.9 * rate))]
    samples += [0.0] * int(1.6 * rate)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(s * 32767)) for s in samples))
    return path


@pytest_asyncio.fixture(scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator:
    """One Chromium for the module; each test opens its own context."""
    mic = tone_wav(tmp_path_factory.mktemp("mic") / "mic48k.wav")
    args = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={mic}%noloop",
            "--autoplay-policy=no-user-gesture-required",
            "--disable-features=WebRtcHideLocalIpsWithMdns",
            "--allow-loopback-in-peer-connection"]
    async with playwright_api.async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            yield b
        finally:
            await b.close()


@pytest_asyncio.fixture
async def open_page(server: FakeVoiceServer, browser) -> AsyncIterator:
    """Factory of pages in fresh contexts; closed before the server stops (it waits on them)."""
    contexts = []

    async def _open(url: str, *, mic: bool = True, mobile: bool = False):
        context = await browser.new_context(
            viewport={"width": 390, "height": 844} if mobile else {"width": 1280, "height": 760},
            device_scale_factor=1, permissions=["microphone"] if mic else [])
        contexts.append(context)
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(url)
        return page, errors

    try:
        yield _open
    finally:
        for context in contexts:
            await context.close()


def shot_path(name: str) -> str:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return str(ARTIFACTS / name)



async def wait_state(page, state: str) -> None:
    await page.wait_for_selector(f"#conn[data-state='{state}']", timeout=TIMEOUT * 1000)


async def test_dead_server_shows_unreachable(server: FakeVoiceServer, open_page) -> None:
    """Main controls are present, and a dead signaling URL shows "server unreachable"."""
    dead = f"ws://127.0.0.1:{free_port()}/ws"
    page, errors = await open_page(f"{server.url}?ws={dead}")
    for selector in ("#talk", "#conn", "#conversation", "#timeline", "#meter-fill",
                     "#agent-audio"):
        assert await page.locator(selector).count() == 1, selector
    notice = page.locator("#notice[data-kind='unreachable']")
    await notice.wait_for(state="visible", timeout=TIMEOUT * 1000)
    text = await notice.inner_text()
    assert "Server unreachable" in text and dead in text
    assert await page.locator("#retry").is_visible()
    await wait_state(page, "closed")
    assert await page.locator("#playbook-picker").is_hidden(), "/playbooks is a 404 here"
    await page.screenshot(path=shot_path("page-unreachable.png"))
    assert errors == []


async def test_conversation_renders(server: FakeVoiceServer, open_page) -> None:
    """Scripted server events render as bubbles, marks, latency and a timeline."""
    server.playbooks = {"default": "dental", "playbooks": [
        {"id": "concierge", "description": "Front desk"},
        {"id": "dental", "description": "Book visits", "stages": ["greeting", "booking"]}]}
    page, errors = await open_page(server.url)
    ws, playbook = await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    assert playbook == "dental", "the server's default playbook is preselected"
    await wait_state(page, "connected")
    assert await page.locator("#transport").inner_text() == "WebSocket"
    assert await page.locator("#playbook-picker").is_visible()
    assert await page.locator("#playbook option").all_inner_texts() == ["concierge", "dental"]

    script = [
        {"type": "speech-start"},
        {"type": "transcript", "text": "Book a table", "isFinal": False},
    ]
    for m in script:
        await ws.send_json(m)
    interim = page.locator(".bubble.user.interim")
    await interim.wait_for(timeout=TIMEOUT * 1000)
    assert await interim.inner_text() == "Book a table"

    script = [
        {"type": "speech-end"},
        {"type": "transcript", "text": "Book a table for two tonight.", "isFinal": True},
        {"type": "llm-chunk", "content": "Let me check ", "done": False},
        {"type": "tool-call-start", "name": "check_availability", "callId": "c1",
         "arguments": {"party": 2, "time": "19:00"}},
        {"type": "tool-call-end", "callId": "c1", "result": {"available": True},
         "durationMs": 42},
        {"type": "stage-change", "from": "greeting", "to": "booking", "reason": "tool_result"},
        {"type": "llm-chunk", "content": "that for you.", "done": True},
        {"type": "llm", "text": "Let me check that for you."},
        {"type": "tts-start"},
        {"type": "tts-complete"},
        {"type": "turn-metrics", "firstAudioMs": 640, "sttMs": 210, "llmTtftMs": 120,
         "ttsFirstAudioMs": 300},
        {"type": "speech-start"},
        {"type": "transcript", "text": "Make it eight o'clock.", "isFinal": True},
        {"type": "llm-chunk", "content": "Sure, I have moved the booking to", "done": False},
        {"type": "tts-start"},
        # barge-in (spec order): the user's speech-start, then tts-cancelled
        {"type": "speech-start"},
        {"type": "tts-cancelled"},
        {"type": "speech-end"},
        {"type": "transcript", "text": "Wait.", "isFinal": True},
        {"type": "error", "code": "TOOL_ERROR", "message": "calendar offline"},
    ]
    for m in script:
        await ws.send_json(m)
    await page.locator(".bubble.agent.interrupted").wait_for(timeout=TIMEOUT * 1000)

    users = await page.locator(".bubble.user").all_inner_texts()
    assert users == ["Book a table for two tonight.", "Make it eight o'clock.", "Wait."]
    assert await page.locator(".bubble.user.interim").count() == 0
    agents = page.locator(".bubble.agent")
    assert await agents.count() == 2
    first = await agents.nth(0).inner_text()
    assert first.startswith("Let me check that for you.")
    assert "reply 640 ms" in first and "STT 210 ms" in first
    second = agents.nth(1)
    assert await second.locator(".mark").text_content() == "interrupted"
    assert "moved the booking to" in await second.locator(".text").inner_text()
    timeline = await page.locator("#timeline li").all_inner_texts()
    assert any("check_availability()" in t and "✓" in t and "42 ms" in t for t in timeline)
    assert any("greeting → booking" in t for t in timeline)
    assert await page.locator("#stage").inner_text() == "booking"
    notice = page.locator("#notice[data-kind='error']")
    assert "TOOL_ERROR" in await notice.inner_text()
    await page.screenshot(path=shot_path("page-conversation.png"))
    assert errors == []


async def test_mobile_layout(server: FakeVoiceServer, open_page) -> None:
    """On a phone-sized screen the talk button is on screen and nothing overflows sideways."""
    page, errors = await open_page(server.url, mobile=True)
    ws, _ = await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")
    for m in [{"type": "transcript", "text": "What can you do?", "isFinal": True},
              {"type": "llm", "text": "I can book tables, answer questions about opening "
                                      "hours and take messages."},
              {"type": "tts-start"}, {"type": "tts-complete"}]:
        await ws.send_json(m)
    await page.locator(".bubble.agent.done").wait_for(timeout=TIMEOUT * 1000)
    box = await page.locator("#talk").bounding_box()
    assert box is not None and box["y"] + box["height"] <= 844 and box["width"] >= 150
    scroll_width = await page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= 390
    await page.screenshot(path=shot_path("page-mobile.png"))
    assert errors == []


async def test_talk_fallback_sends_wav_utterance(server: FakeVoiceServer, open_page) -> None:
    """Without WebRTC, Talk records the fake mic and sends one ``audio`` message (base64 WAV)."""
    page, errors = await open_page(server.url)
    await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")
    await page.click("#talk")
    await page.wait_for_selector("#talk[aria-pressed='true']", timeout=TIMEOUT * 1000)
    await page.wait_for_function("window.voiceApp.client.micLevel > 0.05",
                                 timeout=TIMEOUT * 1000)
    await page.screenshot(path=shot_path("page-talking.png"))
    msg = await asyncio.wait_for(server.audio.get(), TIMEOUT)
    wav = base64.b64decode(msg["data"])
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE"
    channels, rate, bits = struct.unpack("<H", wav[22:24])[0], *struct.unpack("<I", wav[24:28]), \
        struct.unpack("<H", wav[34:36])[0]
    assert (channels, rate, bits) == (1, 16000, 16)
    seconds = struct.unpack("<I", wav[40:44])[0] / 2 / 16000
    assert 1.0 <= seconds <= 3.0, seconds  # 0.9 s tone + pre-roll + trailing silence
    await page.click("#talk")
    await page.wait_for_selector("#talk[aria-pressed='false']", timeout=TIMEOUT * 1000)
    assert errors == []


async def test_webrtc_that_cannot_connect_falls_back_and_says_so(server: FakeVoiceServer,
                                                                  open_page) -> None:
    """The fake server refuses WebRTC (WEBRTC_UNAVAILABLE): the page connects over the
    WebSocket and tells the user why, and what it means (issue 22, item 4)."""
    page, errors = await open_page(server.url)
    await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")
    notice = page.locator("#notice[data-kind='webrtc-blocked']")
    await notice.wait_for(state="visible", timeout=TIMEOUT * 1000)
    text = await notice.inner_text()
    assert "WebRTC could not connect" in text and "WebSocket" in text, text
    assert await page.locator("#transport").inner_text() == "WebSocket"
    assert errors == []


async def test_mic_denied_message(server: FakeVoiceServer, open_page) -> None:
    """A refused microphone permission shows the "microphone blocked" message."""
    page, errors = await open_page(server.url, mic=False)
    await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")
    await page.click("#talk")
    notice = page.locator("#notice[data-kind='mic-denied']")
    await notice.wait_for(state="visible", timeout=TIMEOUT * 1000)
    assert "Microphone blocked" in await notice.inner_text()
    assert await page.locator("#talk").get_attribute("aria-pressed") == "false"
    assert errors == []


async def test_embed_example_from_another_origin(server: FakeVoiceServer, open_page) -> None:
    """The docs' embedding example works from another origin (port) as written."""
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    html = embed_example(port)
    lines = html.strip().splitlines()
    assert len(lines) <= 20, "the example stays short"

    async with serve_html(html) as page_url:
        page, errors = await open_page(page_url)
        await page.click("#talk")
        ws, _ = await asyncio.wait_for(server.sockets.get(), TIMEOUT)
        assert server.origins == [page_url.rstrip("/")]
        await page.wait_for_function("document.getElementById('state').textContent"
                                     " === 'connected'", timeout=TIMEOUT * 1000)
        for m in [{"type": "speech-start"}, {"type": "speech-end"},
                  {"type": "transcript", "text": "Hello there", "isFinal": True},
                  {"type": "llm-chunk", "content": "Hi, ", "done": False},
                  {"type": "llm-chunk", "content": "how can I help?", "done": True},
                  {"type": "llm", "text": "Hi, how can I help?"},
                  {"type": "tts-start"}, {"type": "tts-complete"}]:
            await ws.send_json(m)
        await page.wait_for_function("document.getElementById('agent').textContent"
                                     " === 'Hi, how can I help?'", timeout=TIMEOUT * 1000)
        assert await page.locator("#you").inner_text() == "You: Hello there"
        assert errors == []


AXE_SCRIPT = Path(__import__("axe_playwright_python").__file__).with_name("axe.min.js")


async def axe_violations(page) -> list[dict]:
    """axe-core (bundled by axe-playwright-python) run in the page: WCAG 2 A/AA rules."""
    await page.add_script_tag(content=AXE_SCRIPT.read_text())
    result = await page.evaluate("""async () => {
      const r = await axe.run(document, {runOnly: {type: "tag",
        values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}});
      return {passes: r.passes.map(p => p.id), violations: r.violations.map(v => ({
        id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(" ")).slice(0, 5)}))};
    }""")
    assert "color-contrast" in result["passes"] + [v["id"] for v in result["violations"]]
    return result["violations"]


@pytest.mark.parametrize("mobile,scheme", [(False, "light"), (True, "light"), (False, "dark")])
async def test_accessibility_scan(server: FakeVoiceServer, open_page, mobile, scheme) -> None:
    """Issue 22, item 6: an axe-core scan of the page in use (bubbles, an interrupted reply,
    the timeline, a notice) has no serious or critical violation (contrast included), at 1280
    and 390 px, in the light and the dark colour scheme."""
    page, errors = await open_page(server.url, mobile=mobile)
    await page.emulate_media(color_scheme=scheme)
    ws, _ = await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")
    for m in [{"type": "transcript", "text": "Book a table for two.", "isFinal": True},
              {"type": "tool-call-start", "name": "check", "callId": "c1", "arguments": {}},
              {"type": "tool-call-end", "callId": "c1", "result": {"ok": True},
               "durationMs": 12},
              {"type": "llm", "text": "Done, see you at seven."},
              {"type": "tts-start"}, {"type": "tts-complete"},
              {"type": "speech-start"},
              {"type": "transcript", "text": "Thanks.", "isFinal": True},
              {"type": "llm-chunk", "content": "You are", "done": False},
              {"type": "tts-start"}, {"type": "speech-start"}, {"type": "tts-cancelled"},
              {"type": "error", "code": "TOOL_ERROR", "message": "calendar offline"}]:
        await ws.send_json(m)
    await page.locator(".bubble.agent.interrupted").wait_for(timeout=TIMEOUT * 1000)
    violations = await axe_violations(page)
    serious = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert serious == [], serious
    await page.screenshot(path=shot_path(f"page-a11y-{'390' if mobile else '1280'}-{scheme}.png"))
    assert errors == []


async def test_finished_utterances_are_announced_once_and_new_conversation_clears(
        server: FakeVoiceServer, open_page) -> None:
    """Issue 22, item 6: the bubbles are not a live region (a screen reader would read every
    streamed word); each finished utterance is announced once. "New conversation" clears the
    view and opens a fresh session."""
    page, errors = await open_page(server.url)
    ws, _ = await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")
    assert await page.get_attribute("#conversation", "aria-live") is None
    assert await page.get_attribute("#announce", "aria-live") == "polite"
    await ws.send_json({"type": "transcript", "text": "Is it open today?", "isFinal": True})
    await page.wait_for_function(
        "document.getElementById('announce').textContent === 'You: Is it open today?'",
        timeout=TIMEOUT * 1000)
    await ws.send_json({"type": "llm-chunk", "content": "Yes, until", "done": False})
    await page.locator(".bubble.agent.streaming").wait_for(timeout=TIMEOUT * 1000)
    assert await page.text_content("#announce") == "You: Is it open today?"  # not the words
    await ws.send_json({"type": "llm", "text": "Yes, until nine tonight."})
    await page.wait_for_function(
        "document.getElementById('announce').textContent === 'Agent: Yes, until nine tonight.'",
        timeout=TIMEOUT * 1000)

    await page.click("#new-chat")
    fresh, _ = await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    assert fresh is not ws
    await wait_state(page, "connected")
    assert await page.locator(".bubble").count() == 0
    assert await page.locator("#empty").is_visible()
    assert await page.text_content("#announce") == ""
    assert errors == []


async def test_the_page_shows_what_the_conversation_is_doing(server: FakeVoiceServer,
                                                             open_page) -> None:
    """Issue 22, item 2: one phase from llmrtc.js (listening, user speaking, thinking, agent
    speaking) shown in the bar, and a thinking placeholder under the user's words that the
    first words of the answer replace; a turn that fails while thinking leaves no bubble."""
    page, errors = await open_page(server.url)
    ws, _ = await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")

    async def phase_is(label: str) -> None:
        await page.wait_for_function(
            f"document.getElementById('phase').textContent === {json.dumps(label)}",
            timeout=TIMEOUT * 1000)

    await phase_is("Listening")
    await ws.send_json({"type": "speech-start"})
    await phase_is("You're speaking")
    await ws.send_json({"type": "speech-end"})
    await ws.send_json({"type": "transcript", "text": "What time is it?", "isFinal": True})
    await phase_is("Thinking…")
    thinking = page.locator(".bubble.agent.thinking")
    await thinking.wait_for(timeout=TIMEOUT * 1000)
    order = await page.locator(".bubble").evaluate_all(
        "els => els.map(e => e.classList.contains('user') ? 'user' : 'agent')")
    assert order == ["user", "agent"]  # under the user's words
    await page.screenshot(path=shot_path("page-thinking.png"))
    await ws.send_json({"type": "llm-chunk", "content": "It is ", "done": False})
    await page.locator(".bubble.agent.thinking").wait_for(state="detached",
                                                         timeout=TIMEOUT * 1000)
    assert (await page.locator(".bubble.agent .text").inner_text()).strip() == "It is"
    await ws.send_json({"type": "tts-start"})
    await phase_is("Speaking")
    await ws.send_json({"type": "llm", "text": "It is noon."})
    await ws.send_json({"type": "tts-complete"})
    await phase_is("Listening")

    await ws.send_json({"type": "transcript", "text": "And tomorrow?", "isFinal": True})
    await phase_is("Thinking…")
    await page.locator(".bubble.agent.thinking").wait_for(timeout=TIMEOUT * 1000)
    await ws.send_json({"type": "error", "code": "LLM_ERROR", "message": "model down"})
    await phase_is("Listening")
    assert await page.locator(".bubble.agent.thinking").count() == 0
    assert await page.locator(".bubble.agent").count() == 1
    assert errors == []


FOCUSED = """() => {
  const e = document.activeElement, s = getComputedStyle(e);
  return {id: e.id || e.tagName.toLowerCase(), outline: s.outlineStyle,
          width: parseFloat(s.outlineWidth) || 0, visible: e.matches(':focus-visible')};
}"""


async def test_the_page_works_from_the_keyboard(server: FakeVoiceServer, open_page) -> None:
    """Issue 22, item 6: Tab walks the controls in reading order, each with a visible focus
    ring (at least 2 px); Space switches Talk on and off; Enter in the text box sends the
    message (`user-text`); Enter on a notice's close button dismisses it."""
    page, errors = await open_page(server.url)
    await asyncio.wait_for(server.sockets.get(), TIMEOUT)
    await wait_state(page, "connected")
    notice = page.locator("#notice[data-kind='webrtc-blocked']")
    await notice.wait_for(state="visible", timeout=TIMEOUT * 1000)
    await page.locator("body").click(position={"x": 5, "y": 300})  # focus starts on the page
    walked = []
    for _ in range(12):
        await page.keyboard.press("Tab")
        walked.append(await page.evaluate(FOCUSED))
        if walked[-1]["id"] == "send":
            break
    assert [w["id"] for w in walked] == ["new-chat", "notice-close", "summary", "talk",
                                         "typed", "send"], walked
    for w in walked:
        assert w["visible"] and w["outline"] not in ("none", "") and w["width"] >= 2, w

    await page.focus("#talk")
    await page.keyboard.press("Space")
    await page.wait_for_selector("#talk[aria-pressed='true']", timeout=TIMEOUT * 1000)
    await page.keyboard.press("Space")
    await page.wait_for_selector("#talk[aria-pressed='false']", timeout=TIMEOUT * 1000)

    await page.keyboard.press("Tab")  # to the text box
    await page.keyboard.type("Is the shop open on Sunday?")
    await page.keyboard.press("Enter")
    async with asyncio.timeout(TIMEOUT):
        while not any(m.get("type") == "user-text" for m in server.received):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    sent = [m for m in server.received if m["type"] == "user-text"]
    assert sent == [{"type": "user-text", "text": "Is the shop open on Sunday?"}]
    assert await page.input_value("#typed") == ""

    await page.focus("#notice-close")
    await page.keyboard.press("Enter")
    await notice.wait_for(state="hidden", timeout=TIMEOUT * 1000)
    await page.screenshot(path=shot_path("page-keyboard.png"))
    assert errors == []
