"""Shared pieces of the browser tests: Chromium flags, the loopback-only check, fake mics."""

from __future__ import annotations

import contextlib
import io
import os
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from tests.support.netns import only_loopback

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "web"


def _chromium() -> str | None:
    """Debian's Chromium, else the build Playwright fetched (Ubuntu ships Chromium only as a
    snap: scripts/install-test-deps.sh fetches Playwright's there)."""
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    cache = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright"
    builds = sorted(Path(cache).glob("chromium-*/chrome-linux*/chrome"))
    return str(builds[-1]) if builds else None


CHROMIUM = _chromium()
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--use-fake-device-for-media-stream",
                 "--autoplay-policy=no-user-gesture-required",
                 "--disable-features=WebRtcHideLocalIpsWithMdns",
                 "--allow-loopback-in-peer-connection"]


needs_netns = pytest.mark.skipif(
    not only_loopback(), reason="WebRTC in Chromium runs in a private network namespace "
    "(make test; or tests/web/test_netns.py re-runs it there)")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs a Chromium: Debian's (apt-get install chromium) or "
    "Playwright's (.venv/bin/python -m playwright install --with-deps chromium)")


# the page's peer's inbound audio so far: {packets, energy}, or null before there is one (an
# async function for page.evaluate, or to call in the page)
INBOUND_AUDIO = """async () => {
  const pc = window.voiceApp.client && window.voiceApp.client.peerConnection;
  if (!pc) return null;
  for (const s of (await pc.getStats()).values()) {
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      return {packets: s.packetsReceived, energy: s.totalAudioEnergy || 0};
    }
  }
  return null;
}"""

# a reply long enough to be talking when the user speaks again
LONG_REPLY = ("Paris is the capital of France. It sits on the river Seine and has been the "
              "country's capital for more than a thousand years. Its museums, cafes and "
              "bridges draw millions of visitors every single year from all over the world.")


def static_routes() -> dict[str, str]:
    """URL path -> file in web_client/ of the page's scripts and styles and the client's
    modules, as voice_server serves them (``server/static.py``), for the tests' own servers."""
    from voice_server.server.static import ROUTES

    return {path: name for path, (name, _) in ROUTES.items() if name.endswith((".js", ".css"))}


def screenshot_path(name: str) -> str:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return str(ARTIFACTS / name)


async def launch_chromium(pw: Any, mic_wav: Path, *, loop: bool, fake_ui: bool = True) -> Any:
    """Headless Chromium with a fake mic playing ``mic_wav`` (once, or looping)."""
    args = [*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={mic_wav}"
            + ("" if loop else "%noloop")]
    if fake_ui:
        args.append("--use-fake-ui-for-media-stream")
    return await pw.chromium.launch(executable_path=CHROMIUM, args=args)


@pytest_asyncio.fixture(scope="session")
async def web_llm() -> AsyncIterator[Any]:
    """A scripted OpenAI-compatible LLM for the browser end-to-end tests."""
    from tests.support.fake_openai import FakeOpenAI

    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_script(request: pytest.FixtureRequest) -> None:
    """A test that uses the scripted LLM starts with none of an earlier test's replies."""
    if "web_llm" in request.fixturenames:
        request.getfixturevalue("web_llm").reset()


@pytest_asyncio.fixture(scope="session")
async def voice_server(web_llm: Any) -> AsyncIterator[Any]:
    """The real server (VAD, STT, TTS; scripted LLM), ICE on 127.0.0.1 only."""
    from voice_server.config import load_settings
    from voice_server.server.app import VoiceServer

    settings = load_settings(port=0, llm_provider="openai_compat", llm_base_url=web_llm.base_url,
                             llm_model="fake-model", ice_host_addresses="127.0.0.1",
                             ice_candidate_allow="127.0.0.1")
    async with VoiceServer(settings) as server:
        yield server


def mic_file(tmp_path: Path, make_speech: Any, *parts: tuple[str, float, float]) -> Path:
    """Concatenate espeak utterances (text, lead silence, tail silence) into a 48 kHz WAV."""
    frames = b""
    for text, lead, tail in parts:
        with wave.open(io.BytesIO(make_speech(text, rate=48000, pad=(lead, tail)))) as w:
            frames += w.readframes(w.getnframes())
    path = tmp_path / "mic48k.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(48000)
        w.writeframes(frames)
    return path


def embed_example(port: int) -> str:
    """The HTML example of the README's "Embed the client", pointed at the test server."""
    doc = (ROOT / "README.md").read_text()
    section = doc.split("## Embed the client", 1)[1]
    html = section.split("```html\n", 1)[1].split("```", 1)[0]
    assert html.count("127.0.0.1:8787") == 2
    return html.replace("127.0.0.1:8787", f"127.0.0.1:{port}")


@contextlib.asynccontextmanager
async def serve_html(html: str, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """One page served from another origin (a free port on ``host``); yields its URL."""
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, 0)
        await site.start()
        yield f"http://{host}:{site._server.sockets[0].getsockname()[1]}/"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
