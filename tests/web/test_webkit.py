"""The bundled page in WebKit, Safari's engine (Debian's WebKitGTK, MiniBrowser on Xvfb, driven
through WebKitWebDriver: ``webkit_session.py``), against the real voice_server: a third
browser engine beside the Chromium and Firefox tests.

Debian 12's WebKitGTK has no WebRTC (``RTCPeerConnection`` is undefined: built without it),
so the page falls back to the WebSocket on its own: the microphone goes through its
AudioWorklet recorder as WAV utterances, the agent's voice comes back as ``tts-chunk``
messages played with Web Audio. WebRTC in WebKit is not tested here (Safari's own libwebrtc
is not in any Debian package). Everything goes over 127.0.0.1: no namespace or root needed.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import LONG_REPLY, mic_file
from tests.web.webkit_session import DRIVER, MINIBROWSER, XVFB, converse

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(DRIVER is None or MINIBROWSER is None,
                       reason="needs WebKitGTK's WebDriver and MiniBrowser "
                       "(apt-get install webkit2gtk-driver)"),
    pytest.mark.skipif(XVFB is None, reason="needs Xvfb: WebKitGTK has no headless mode "
                       "(apt-get install xvfb)"),
    pytest.mark.skipif(importlib.util.find_spec("selenium") is None,
                       reason="needs selenium (pip install -e '.[test]')"),
    # Selenium's own WebKitGTK driver makes its connection the deprecated way (4.51)
    pytest.mark.filterwarnings("ignore:setting remote_server_addr:DeprecationWarning"),
]


async def talk(server: Any, tmp_path: Path, mic: Path, turns: int) -> dict[str, Any]:
    """What the page showed, after checking it connected over the WebSocket fallback (no
    WebRTC in this WebKit), opened the fake mic once and threw no error."""
    url = f"http://127.0.0.1:{server.port}/?echoCancellation=0"
    page = await asyncio.to_thread(converse, url, mic, tmp_path / "webkit.log", turns)
    assert page["connected"] == "connected", page
    assert page["peerConnection"] == "undefined", (
        "this WebKit has WebRTC and the page took it: check its inbound audio here too, as "
        "test_firefox.py does, and its WebSocket fallback with ?transport=ws")
    assert page["transport"] == "WebSocket", page
    assert page["opened"] == 1, page
    assert page["errors"] == [], page
    return page


async def test_webkit_talks_with_the_server(voice_server, web_llm, make_speech,
                                            tmp_path: Path) -> None:
    """Speak a question in WebKit: the page connects (WebSocket fallback), shows the
    transcript and the agent's reply with the server's figures, and plays the reply's voice
    to the end."""
    reply = "The moon is about four hundred thousand kilometres away."
    web_llm.answer("moon", reply)
    mic = mic_file(tmp_path, make_speech, ("How far away is the moon?", 1.5, 2.0))
    page = await talk(voice_server, tmp_path, mic, turns=1)
    assert len(page["user"]) == 1 and "moon" in page["user"][0].lower(), page
    assert page["agent"] == [reply], page
    assert page["done"] == 1 and page["interrupted"] == 0, page
    assert "STT" in page["figures"], page
    # the voice: about 3 s of speech (not silence), every buffer played to its end
    played = page["played"]
    assert played["chunks"] >= 1 and played["ended"] == played["chunks"], page
    assert played["seconds"] > 1.5 and played["energy"] > 1.0, page



async def test_webkit_barge_in_stops_the_agent(voice_server, web_llm, make_speech,
                                               tmp_path: Path) -> None:
    """A second question while the long reply still plays. Over the WebSocket fallback all of
    its audio arrives within a moment and plays for many seconds after; the server keeps the
    turn open until the page has played it (tts-complete means playback finished), so the
    question cuts it: tts-cancelled stops the page's player and marks the reply interrupted,
    and the second question is answered, not queued behind the rest of the first."""
    web_llm.answer("france", LONG_REPLY).answer("germany", "Berlin is the capital of Germany.")
    mic = mic_file(tmp_path, make_speech, ("What is the capital of France?", 1.5, 4.5),
                   ("And what about Germany?", 0.0, 2.5))
    page = await talk(voice_server, tmp_path, mic, turns=2)
    assert page["done"] == 2 and page["interrupted"] == 1, page
    cut, answer = page["agent"]
    assert cut and LONG_REPLY.startswith(cut[:20]), page
    assert answer == "Berlin is the capital of Germany.", page
    assert "germany" in page["user"][-1].lower(), page
