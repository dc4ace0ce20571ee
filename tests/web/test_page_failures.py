"""Failures explained (issue 22, item 4) in headless Chromium against the real server: the
README's embed snippet served from an origin the server does not allow says so (not "server
unreachable"), and the server logs a WARNING naming the origin and the setting; a server that is
down is "unreachable".

Runs only in a private network namespace (``make test``): the refused page is served on
127.0.0.2, which is loopback too but not one of the default allowed origins.
"""

from __future__ import annotations

import logging
import socket
import wave

import pytest
from playwright.async_api import async_playwright

from tests.conftest import scaled
from tests.web.conftest import (
    embed_example,
    launch_chromium,
    needs_chromium,
    needs_netns,
    serve_html,
)

pytestmark = [needs_chromium, needs_netns, pytest.mark.slow]


async def _problem_after_talk(url: str, tmp_path) -> str:
    silent = tmp_path / "silence.wav"  # the fake microphone (never opened: connect fails first)
    with wave.open(str(silent), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(48000)
        w.writeframes(b"\0\0" * 48000)
    async with async_playwright() as pw:
        browser = await launch_chromium(pw, silent, loop=False)
        try:
            page = await (await browser.new_context()).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(url)
            await page.click("#talk")
            await page.wait_for_function("document.getElementById('problem').textContent",
                                         timeout=scaled(30) * 1000)
            assert errors == []
            return await page.locator("#problem").inner_text()
        finally:
            await browser.close()


async def test_a_refused_origin_is_explained_on_the_page_and_in_the_log(voice_server, tmp_path,
                                                                       caplog) -> None:
    caplog.set_level(logging.WARNING, logger="voice_server.server.http")
    async with serve_html(embed_example(voice_server.port), "127.0.0.2") as page_url:
        problem = await _problem_after_talk(page_url, tmp_path)
    origin = page_url.rstrip("/")
    assert "does not allow this site" in problem and "allowed_origins" in problem, problem
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(origin in w and "allowed_origins" in w for w in warnings), \
        warnings


async def test_a_server_that_is_down_is_unreachable(voice_server, tmp_path) -> None:
    """The snippet points at a port nobody listens on (the module still comes from the real
    server): the page says unreachable, not refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    html = embed_example(voice_server.port).replace(
        f"ws://127.0.0.1:{voice_server.port}/ws", f"ws://127.0.0.1:{dead}/ws")
    async with serve_html(html) as page_url:
        problem = await _problem_after_talk(page_url, tmp_path)
    assert problem == "The voice server is unreachable.", problem
