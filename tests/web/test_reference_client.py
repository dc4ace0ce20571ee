"""Compatibility: the reference browser client (npm ``@llmrtc/llmrtc-web-client``, unchanged,
bundled with esbuild) holds a conversation with voice_server in headless Chromium.

``make install-test`` installs it into ``tests/web/reference_client/node_modules`` (npm ci);
this test bundles it into a temp dir. Runs only in a private network namespace.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from aiohttp import web
from playwright.async_api import async_playwright

from tests.conftest import scaled
from tests.web.conftest import (
    launch_chromium,
    mic_file,
    needs_chromium,
    needs_netns,
    screenshot_path,
)

HERE = Path(__file__).resolve().parent / "reference_client"
ESBUILD = HERE / "node_modules" / ".bin" / "esbuild"

pytestmark = [needs_chromium, needs_netns, pytest.mark.slow]

MOON = "The moon is about four hundred thousand kilometres away."

PAGE = """<!doctype html><meta charset="utf-8"><title>reference client</title>
<audio id="agent" autoplay></audio><script type="module" src="ref.js"></script>"""


def words(text: str) -> set[str]:
    return {w.strip(".,!?'\"").lower() for w in text.split()} - {""}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not ESBUILD.exists():
        pytest.skip("the reference client is not installed: make install-test "
                    "(npm ci --prefix tests/web/reference_client)")
    out = tmp_path_factory.mktemp("refclient") / "ref.js"
    subprocess.run([str(ESBUILD), str(HERE / "entry.js"), "--bundle", "--format=esm",
                    f"--outfile={out}", "--log-level=warning"], check=True, cwd=HERE,
                   capture_output=True, timeout=120)
    return out


async def test_reference_client_converses(voice_server, web_llm, make_speech, bundle: Path,
                                          tmp_path: Path) -> None:
    """start() + shareAudio(): transcript, llm and tts events arrive once each, and the
    agent's voice plays from the audio track (inbound-rtp packets with energy)."""
    web_llm.answer("moon", MOON)
    mic = mic_file(tmp_path, make_speech, ("How far away is the moon?", 1.5, 2.0))

    async def page_handler(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def js_handler(request: web.Request) -> web.FileResponse:
        return web.FileResponse(bundle, headers={"Content-Type": "text/javascript"})

    app = web.Application()
    app.router.add_get("/", page_handler)
    app.router.add_get("/ref.js", js_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    ws_url = f"ws://127.0.0.1:{voice_server.port}/ws"
    try:
        async with async_playwright() as pw:
            browser = await launch_chromium(pw, mic, loop=False)
            try:
                page = await (await browser.new_context()).new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await page.goto(f"http://127.0.0.1:{port}/?ws={ws_url}")
                await page.wait_for_function("window.startTalking !== undefined",
                                             timeout=scaled(10) * 1000)
                session = await page.evaluate("window.startTalking()")
                assert session
                await page.wait_for_function(
                    "window.refLog.some(e => e[0] === 'ttsComplete')", timeout=scaled(60) * 1000)
                log = await page.evaluate("window.refLog")
                kinds = [e[0] for e in log if e[0] not in ("llmChunk", "stateChange")]
                assert kinds.count("transcript") >= 1 and kinds.count("llm") == 1, log
                assert kinds.count("ttsStart") == 1 and kinds.count("ttsComplete") == 1, log
                assert "error" not in kinds, log
                finals = [e[1] for e in log if e[0] == "transcript" and e[2]]
                assert len(finals) == 1 and {"far", "moon"} <= words(finals[0]), log
                assert [e[1] for e in log if e[0] == "llm"] == [MOON]
                chunks = "".join(e[1] for e in log if e[0] == "llmChunk")
                assert chunks == MOON, "each chunk exactly once"
                stats = await page.evaluate("window.inboundAudio()")
                assert stats and stats["packets"] > 50 and stats["energy"] > 0, stats
                await page.screenshot(path=screenshot_path("reference-client.png"))
                assert errors == []
            finally:
                await browser.close()
    finally:
        await runner.cleanup()
