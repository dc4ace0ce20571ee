"""One conversation in headless Firefox with the real voice_server, run by test_firefox.py in a
network namespace of its own: ``python -m tests.web.firefox_session --mic WAV --log FILE
--reply TEXT [--reply TEXT ...]`` (the scripted LLM's answers, one a turn) prints one JSON line
of what the page showed once every answer is done (spoken whole or interrupted).

Firefox is driven through Marionette, its own remote protocol, by Mozilla's
``marionette-driver``. It has no fake microphone that plays a file, so the page's
``getUserMedia`` answers with a Web Audio stream that plays the WAV from the moment the page
opens the microphone, as Chromium's ``--use-file-for-fake-audio-capture`` does. Web Audio needs
a sound server (the test starts a PulseAudio with a null sink; ``PULSE_SERVER``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import time
from pathlib import Path
from typing import Any

from tests.support.fake_openai import FakeOpenAI, Reply
from tests.web.conftest import INBOUND_AUDIO

HOST = "10.99.0.1"  # the namespace's own address (test_firefox.py); Firefox offers no loopback

PREFS = {
    "media.navigator.permission.disabled": True,
    "media.autoplay.default": 0,
    "media.autoplay.block-webaudio": False,
    "media.peerconnection.ice.obfuscate_host_addresses": False,  # no mDNS names
    "devtools.console.stdout.content": True,  # the page's console in the log
    "browser.shell.checkDefaultBrowser": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "toolkit.telemetry.enabled": False,
    "app.update.enabled": False,
}

FAKE_MIC = """
(() => {
  const bytes = Uint8Array.from(atob(%s), (c) => c.charCodeAt(0));
  window.fakeMic = {opened: 0};
  navigator.mediaDevices.getUserMedia = async () => {
    const ctx = new AudioContext({sampleRate: 48000});
    const buffer = await ctx.decodeAudioData(bytes.buffer.slice(0));
    const source = ctx.createBufferSource();
    source.buffer = buffer;
    const out = ctx.createMediaStreamDestination();
    source.connect(out);
    source.start();
    window.fakeMic.opened++;
    return out.stream;
  };
})();
"""

# what the page shows of the conversation: the user's and the agent's bubbles, how many of
# the agent's are closed and interrupted, the last reply's figures (the Firefox and WebKit
# sessions each return it with their own fields)
BUBBLES = """
const texts = (sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent);
const latency = document.querySelector('.bubble.agent .latency');
const bubbles = {
  user: texts('.bubble.user:not(.interim) .text'),
  agent: texts('.bubble.agent .text'),
  done: document.querySelectorAll('.bubble.agent.done').length,
  interrupted: document.querySelectorAll('.bubble.agent.interrupted').length,
  figures: latency ? latency.textContent : "",
};"""

STATE = BUBBLES + """
const w = window.wrappedJSObject;
return {
  ...bubbles,
  transport: document.querySelector('#transport').innerText,
  opened: w.fakeMic ? w.fakeMic.opened : 0,
};"""

# in the page's scope, like FAKE_MIC: the answer lands in window.inboundAudio
INBOUND_AUDIO_KEPT = f"({INBOUND_AUDIO})().then((stats) => {{ window.inboundAudio = stats; }});"
INJECT = ("const s = document.createElement('script'); s.textContent = arguments[0]; "
          "document.head.appendChild(s);")


def until(client: Any, script: str, test: Any, timeout_s: float) -> Any:
    """Run ``script`` in the page (a Marionette or Selenium client) every 0.25 s until
    ``test`` holds for its value or ``timeout_s`` passes; the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = client.execute_script(script)
        if test(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.25)


def converse(url: str, mic: Path, log: Path, turns: int) -> dict[str, Any]:
    """Open the page, talk until ``turns`` answers are done, and say what it showed."""
    from marionette_driver.by import By
    from marionette_driver.marionette import Marionette

    client = Marionette(host="127.0.0.1", port=0, bin=_firefox(), headless=True,
                        prefs=PREFS, gecko_log=str(log), startup_timeout=120)
    try:
        client.start_session()
        client.navigate(url)
        connected = until(client, "return document.querySelector('#conn').dataset.state",
                          lambda state: state == "connected", 30)
        audio = base64.b64encode(mic.read_bytes()).decode()
        client.execute_script(INJECT, script_args=[FAKE_MIC % f'"{audio}"'])
        client.find_element(By.ID, "talk").click()
        state = until(client, STATE, lambda s: s["done"] >= turns and "STT" in s["figures"],
                      30 + 30 * turns)
        state["connected"] = connected
        state["inbound"] = None  # the WebSocket fallback's audio comes in its messages
        if state["transport"] == "WebRTC":
            client.execute_script(INJECT, script_args=[INBOUND_AUDIO_KEPT])
            state["inbound"] = until(
                client, "return window.wrappedJSObject.inboundAudio || null", bool, 10)
        return state
    finally:
        client.cleanup()


def _firefox() -> str:
    found = shutil.which("firefox-esr")
    if found is None:
        raise SystemExit("no firefox-esr on PATH")
    return found


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from voice_server.config import load_settings
    from voice_server.server.app import VoiceServer

    async with FakeOpenAI() as fake:
        # the answer to the n-th question whatever came before it: a pause inside a question
        # may be answered speculatively, and such a request would take a scripted answer
        def answer(body: dict[str, Any]) -> Reply:
            asked = sum(1 for m in body.get("messages", []) if m.get("role") == "user")
            return Reply(text=args.reply[min(max(asked, 1), len(args.reply)) - 1])

        fake.reply_for = answer
        settings = load_settings(port=0, llm_provider="openai_compat",
                                 llm_base_url=fake.base_url, llm_model="fake-model",
                                 ice_host_addresses=HOST, ice_candidate_allow=HOST)
        async with VoiceServer(settings) as server:
            url = f"http://127.0.0.1:{server.port}/?echoCancellation=0{args.query}"
            return await asyncio.to_thread(converse, url, Path(args.mic), Path(args.log),
                                           len(args.reply))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mic", required=True, help="48 kHz mono WAV the microphone plays")
    parser.add_argument("--log", required=True, help="Firefox's log (the page's console too)")
    parser.add_argument("--query", default="", help="more of the page's query, e.g. "
                        "'&transport=ws' (app.js)")
    parser.add_argument("--reply", action="append", required=True,
                        help="the scripted LLM's answer to a turn (one per turn, in order)")
    print(json.dumps(asyncio.run(main(parser.parse_args()))), flush=True)
