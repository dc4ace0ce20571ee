"""The bundled page against the real voice_server in headless Chromium (issue 4 end to end):
real VAD, STT and TTS over WebRTC, a scripted LLM. A fake mic plays espeak-ng speech.

Runs only in a private network namespace (``make test``; ``test_netns.py`` otherwise).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from tests.conftest import scaled
from tests.support.fake_openai import Reply
from tests.web.conftest import (
    INBOUND_AUDIO,
    LONG_REPLY,
    embed_example,
    launch_chromium,
    mic_file,
    needs_chromium,
    needs_netns,
    screenshot_path,
    serve_html,
)
from voice_server.server.app import VoiceServer

pytestmark = [needs_chromium, needs_netns, pytest.mark.slow]



# Whisper tiny.en is fickle on some espeak phrases ("capital of Spain" -> "capital insane"):
# these were checked to transcribe reliably.
def words(text: str) -> set[str]:
    return {w.strip(".,!?'\"").lower() for w in text.split()} - {""}


async def open_page(pw, server: VoiceServer, mic: Path):
    browser = await launch_chromium(pw, mic, loop=False)
    page = await (await browser.new_context(viewport={"width": 1200, "height": 760})).new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    await page.goto(f"http://127.0.0.1:{server.port}/?echoCancellation=0")
    await page.wait_for_selector("#conn[data-state='connected']", timeout=scaled(15) * 1000)
    return browser, page


async def test_page_talks_with_the_server(voice_server, web_llm, make_speech, tmp_path) -> None:
    """Speak a question: the transcript and the agent's reply appear in the page, and the
    agent's voice arrives on the WebRTC audio track (inbound-rtp packets with energy)."""
    web_llm.answer("moon", "The moon is about four hundred thousand kilometres away.")
    mic = mic_file(tmp_path, make_speech, ("How far away is the moon?", 1.5, 2.0))
    async with async_playwright() as pw:
        browser, page = await open_page(pw, voice_server, mic)
        try:
            assert await page.locator("#transport").inner_text() == "WebRTC"
            await page.click("#talk")
            await page.locator(".bubble.agent.done").wait_for(timeout=scaled(60) * 1000)
            user = await page.locator(".bubble.user").all_inner_texts()
            assert len(user) == 1 and {"far", "moon"} <= words(user[0]), user
            agent = await page.locator(".bubble.agent .text").all_inner_texts()
            assert agent == ["The moon is about four hundred thousand kilometres away."]
            assert await page.locator(".bubble.agent.interrupted").count() == 0
            stats = await page.evaluate(INBOUND_AUDIO)
            assert stats and stats["packets"] > 50 and stats["energy"] > 0, stats
            # the reply's figures are the server's own (turn-metrics, issue 22 item 2)
            await page.wait_for_function(
                "(document.querySelector('.bubble.agent .latency') || {}).textContent"
                "?.includes('STT')", timeout=scaled(30) * 1000)
            await page.screenshot(path=screenshot_path("page-e2e.png"))
            assert page.errors == []
        finally:
            await browser.close()


async def test_barge_in_marks_the_reply_interrupted(voice_server, web_llm, make_speech,
                                                    tmp_path) -> None:
    """A second question while the agent speaks cuts it: `tts-cancelled` arrives and the reply
    bubble carries the "interrupted" mark, then the second question is answered."""
    web_llm.answer("france", LONG_REPLY).answer("germany", "Berlin is the capital of Germany.")
    mic = mic_file(tmp_path, make_speech, ("What is the capital of France?", 1.5, 4.5),
                   ("And what about Germany?", 0.0, 2.5))
    async with async_playwright() as pw:
        browser, page = await open_page(pw, voice_server, mic)
        try:
            await page.evaluate("""() => {
              const t0 = performance.now();
              window.cancelled = 0;
              window.voiceLog = [];
              const c = window.voiceApp.client;
              c.addEventListener("tts-cancelled", () => window.cancelled++);
              c.addEventListener("message", (e) => window.voiceLog.push(
                [Math.round(performance.now() - t0), e.detail.type,
                 e.detail.text || e.detail.content || ""]));
            }""")
            await page.click("#talk")
            interrupted = page.locator(".bubble.agent.interrupted")
            try:
                await interrupted.wait_for(timeout=scaled(60) * 1000)
            except Exception as exc:
                log = await page.evaluate("window.voiceLog")
                raise AssertionError(f"no interrupted reply; events: {log}") from exc
            assert await interrupted.locator(".mark").text_content() == "interrupted"
            assert await page.evaluate("window.cancelled") >= 1
            said = await interrupted.locator(".text").inner_text()
            assert said and LONG_REPLY.startswith(said[:20])
            await page.wait_for_function(
                "document.querySelectorAll('.bubble.agent.done').length >= 2",
                timeout=scaled(60) * 1000)
            users = await page.locator(".bubble.user").all_inner_texts()
            assert "germany" in words(users[-1]), users
            await page.screenshot(path=screenshot_path("page-barge-in.png"))
            assert page.errors == []
        finally:
            await browser.close()


async def test_interrupting_before_the_first_audio_closes_the_turn(voice_server, web_llm,
                                                                 make_speech, tmp_path) -> None:
    """Issue 22, item 1: the user speaks again while the answer is still streaming as text and
    none of it has been spoken. The half-written bubble must not stay open ("I'm▍" forever):
    it ends as the text so far, marked interrupted, and the new question gets its answer."""
    # two words at once, then nothing for 6 s: the text streams ("Let" goes out once " me" is
    # in), and the first piece, two words (tts_first_piece_words) ended by the next word's
    # space, cannot be spoken before the user goes on. With a word every 0.6 s it was spoken
    # 1.8 s in, before the second question was heard, once, in a CI beside other tests on an
    # AMD EPYC with AVX-512 (2026-12-02).
    slow = Reply(text="Let me think about that question for a little while longer now.",
                 stall_after_words=2, stall_s=6.0)
    web_llm.answer("story", slow).answer("germany", "Berlin is the capital of Germany.")

    # a question that ends on a likely last word: "capital city of France" in espeak-ng was
    # heard "capital and friends?" and "capital city on France?" on some CPUs, and such an
    # unlikely last word waits 1.6 s (end_of_turn.py), longer than this user's 1.2 s pause:
    # the two questions were then one turn (a 2.45 GHz AMD EPYC, 2026-12-01). And no comma:
    # espeak-ng pauses at one, and "a story, | please?" was two turns, each cut, in 3 of 5
    # runs (AVX-512 EPYC, 2026-12-02), so the two closed bubbles were both the slow answer's
    mic = mic_file(tmp_path, make_speech, ("Can you tell me a story please?", 1.5, 1.2),
                   ("And what about Germany?", 0.0, 3.0))
    async with async_playwright() as pw:
        browser, page = await open_page(pw, voice_server, mic)
        try:
            await page.evaluate("""() => {
              window.voiceLog = [];
              window.voiceApp.client.addEventListener("message", (e) =>
                window.voiceLog.push([e.detail.type, e.detail.text || ""]));
            }""")
            await page.click("#talk")
            try:
                await page.wait_for_function(
                    "document.querySelectorAll('.bubble.agent.done').length >= 2",
                    timeout=scaled(60) * 1000)
            except Exception as exc:
                log = await page.evaluate("window.voiceLog")
                raise AssertionError(f"the turns did not both close; events: {log}") from exc
            log = [t for t, _ in await page.evaluate("window.voiceLog")]
            first_end = log.index("tts-cancelled") if "tts-cancelled" in log else log.index("llm")
            assert "llm-chunk" in log[:first_end] and "tts-start" not in log[:first_end], \
                " ".join(log)
            agents = page.locator(".bubble.agent")
            first, second = agents.nth(0), agents.nth(1)
            classes = (await first.get_attribute("class") or "").split()
            assert "streaming" not in classes and "speaking" not in classes, classes
            assert "interrupted" in classes, classes
            said = await first.locator(".text").inner_text()
            assert said and slow.text.startswith(said.rstrip("…")), said
            assert await second.locator(".text").inner_text() == "Berlin is the capital of Germany."
            assert await page.locator(".bubble.agent.streaming").count() == 0
            await page.screenshot(path=screenshot_path("page-interrupt-before-audio.png"))
            assert page.errors == []
        finally:
            await browser.close()


async def test_embed_example_talks_with_the_server(voice_server, web_llm, make_speech,
                                                   tmp_path) -> None:
    """The docs' embedding example, served from another origin, talks to the real server."""
    web_llm.answer("germany", "Berlin is the capital of Germany.")
    mic = mic_file(tmp_path, make_speech, ("What is the capital of Germany?", 1.5, 2.0))
    async with serve_html(embed_example(voice_server.port)) as page_url:
        async with async_playwright() as pw:
            browser = await launch_chromium(pw, mic, loop=False)
            try:
                page = await (await browser.new_context()).new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await page.goto(page_url)
                await page.click("#talk")
                await page.wait_for_function(
                    "document.getElementById('agent').textContent"
                    " === 'Berlin is the capital of Germany.'", timeout=scaled(60) * 1000)
                assert "germany" in words(await page.locator("#you").inner_text())
                assert await page.locator("#state").inner_text() == "connected"
                assert errors == []
            finally:
                await browser.close()


async def test_websocket_fallback_talks_with_the_server(voice_server, web_llm, make_speech,
                                                        tmp_path) -> None:
    """Without WebRTC (?transport=ws) the page sends the utterance as `audio` (WAV) and plays
    the reply's `tts-chunk` PCM through Web Audio."""
    web_llm.answer("weather", "It is sunny and warm today.")
    mic = mic_file(tmp_path, make_speech, ("Tell me about the weather today.", 1.5, 2.0))
    async with async_playwright() as pw:
        browser = await launch_chromium(pw, mic, loop=False)
        try:
            page = await (await browser.new_context()).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"http://127.0.0.1:{voice_server.port}/?transport=ws")
            await page.wait_for_selector("#conn[data-state='connected']",
                                         timeout=scaled(15) * 1000)
            assert await page.locator("#transport").inner_text() == "WebSocket"
            await page.evaluate("""() => {
              window.chunks = [];
              window.voiceApp.client.addEventListener("tts-chunk",
                (e) => window.chunks.push([e.detail.format, e.detail.sampleRate]));
            }""")
            await page.click("#talk")
            await page.locator(".bubble.agent.done").wait_for(timeout=scaled(60) * 1000)
            user = await page.locator(".bubble.user").all_inner_texts()
            assert {"weather", "today"} <= words(user[-1]), user
            agent = await page.locator(".bubble.agent .text").all_inner_texts()
            assert agent == ["It is sunny and warm today."]
            chunks = await page.evaluate("window.chunks")
            assert chunks and all(fmt == "pcm" and rate > 8000 for fmt, rate in chunks), chunks
            scheduled = await page.evaluate("window.voiceApp.client.player.nextTime")
            assert scheduled > 0.5, "the PCM chunks were scheduled on the AudioContext"
            assert errors == []
        finally:
            await browser.close()


async def test_a_typed_message_gets_a_spoken_answer(voice_server, web_llm, make_speech,
                                                    tmp_path) -> None:
    """Typed input (issue 22, item 3): no microphone is switched on; the typed question shows
    as the user's bubble, the answer as the agent's, and it is spoken (on the WebRTC track or,
    without one, as `tts-chunk` audio the page plays)."""
    web_llm.answer("sky", "Light from the sun is scattered by the air, and blue scatters most.")
    mic = mic_file(tmp_path, make_speech, ("Nothing to hear here.", 0.5, 0.5))
    async with async_playwright() as pw:
        browser, page = await open_page(pw, voice_server, mic)
        try:
            await page.evaluate("""() => {
              window.chunks = 0;
              window.voiceApp.client.addEventListener("tts-chunk", () => window.chunks++);
            }""")
            await page.fill("#typed", "Why is the sky blue?")
            await page.press("#typed", "Enter")
            await page.locator(".bubble.agent.done").wait_for(timeout=scaled(60) * 1000)
            assert await page.locator(".bubble.user .text").all_inner_texts() == [
                "Why is the sky blue?"]
            agent = await page.locator(".bubble.agent .text").all_inner_texts()
            assert agent == ["Light from the sun is scattered by the air, and blue scatters "
                             "most."]
            assert await page.input_value("#typed") == ""
            assert not await page.evaluate("window.voiceApp.micOn")
            stats = await page.evaluate(INBOUND_AUDIO)
            chunks = await page.evaluate("window.chunks")
            spoken_on_track = bool(stats and stats["energy"] > 0)
            assert spoken_on_track or chunks > 0, (stats, chunks)
            await page.screenshot(path=screenshot_path("page-typed.png"))
            assert page.errors == []
        finally:
            await browser.close()
