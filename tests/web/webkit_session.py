"""The bundled page in WebKit (WebKitGTK's MiniBrowser, driven by its WebDriver,
``WebKitWebDriver``, through Selenium's client) on a virtual X display, for test_webkit.py.

Debian 12's WebKitGTK (2.50) is built without WebRTC: ``RTCPeerConnection`` is undefined
whatever the settings say (``--enable-webrtc=true`` included; the library has no JS binding of
it), while ``getUserMedia``, Web Audio with ``AudioWorklet`` and ``WebSocket`` are there. So
the page talks over its WebSocket fallback here, found on its own (no ``?transport=ws``).

WebKitGTK has no headless mode: MiniBrowser runs on an Xvfb display of its own. Like the
Firefox session, its ``getUserMedia`` answers with a Web Audio stream playing the WAV from the
moment the page opens the microphone (``FAKE_MIC``). Web Audio needs no sound server here: with
no audio device WebKit's rendering clock still runs, so the agent's audio is played (its
buffers end) in real time.
"""

from __future__ import annotations

import base64
import contextlib
import glob
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import scaled
from tests.web.firefox_session import BUBBLES, FAKE_MIC, INJECT, until

DRIVER = shutil.which("WebKitWebDriver")  # Debian's webkit2gtk-driver
XVFB = shutil.which("Xvfb")  # Debian's xvfb
# WebKitGTK's own small browser, in libwebkit2gtk-4.1-0 (an architecture's folder)
MINIBROWSER = next(iter(sorted(glob.glob("/usr/lib/*/webkit2gtk-4.1/MiniBrowser"))), None)

BROWSER_ARGS = [
    "--automation",  # WebKitWebDriver adds nothing to the args of a binary it is given
    "--enable-media-stream=true",
    "--enable-webaudio=true",
    "--autoplay-policy=allow",
]

# Every buffer the page plays to the speakers (an AudioBufferSourceNode connected to the
# context's destination: the WebSocket fallback's ChunkPlayer; the fake mic's goes to a
# MediaStream instead): how many, their seconds and energy, how many were played to the end.
# And any error the page throws from now on (the browser writes no console to the log in
# automation mode; an error while the page loads leaves it unconnected, which the test sees).
WATCH = """
window.played = {chunks: 0, seconds: 0, energy: 0, ended: 0};
window.pageErrors = [];
window.addEventListener('error', (e) => window.pageErrors.push(String(e.message)));
window.addEventListener('unhandledrejection', (e) => window.pageErrors.push(String(e.reason)));
const connect = AudioNode.prototype.connect;
AudioNode.prototype.connect = function (target, ...rest) {
  if (this instanceof AudioBufferSourceNode && target instanceof AudioDestinationNode) {
    this.toSpeakers = true;
  }
  return connect.call(this, target, ...rest);
};
const start = AudioBufferSourceNode.prototype.start;
AudioBufferSourceNode.prototype.start = function (...args) {
  if (this.toSpeakers && this.buffer) {
    let energy = 0;
    for (const x of this.buffer.getChannelData(0)) energy += x * x;
    window.played.chunks++;
    window.played.seconds += this.buffer.duration;
    window.played.energy += energy;
    this.addEventListener('ended', () => { window.played.ended++; });
  }
  return start.apply(this, args);
};
"""

STATE = BUBBLES + """
return {
  ...bubbles,
  ready: !!window.voiceApp,
  connected: document.querySelector('#conn').dataset.state,
  transport: document.querySelector('#transport').textContent,
  peerConnection: typeof RTCPeerConnection,
  opened: window.fakeMic ? window.fakeMic.opened : 0,
  played: window.played || null,
  errors: window.pageErrors || [],
};"""


@contextlib.contextmanager
def xvfb() -> Iterator[str]:
    """An X server of its own on a free display (``-displayfd``); yields DISPLAY."""
    assert XVFB is not None
    read, write = os.pipe()
    process = subprocess.Popen([XVFB, "-displayfd", str(write), "-nolisten", "tcp",
                                "-screen", "0", "1280x1024x24"], pass_fds=(write,),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()  # written once the display accepts clients
        assert number, f"Xvfb did not start (exit status {process.poll()})"
        yield f":{number}"
    finally:
        process.terminate()
        process.wait(10)


def converse(url: str, mic: Path, log: Path, turns: int) -> dict[str, Any]:
    """Open the page in MiniBrowser, press Talk with the fake mic playing ``mic``, and say what
    the page showed once ``turns`` answers are done and their audio has played to the end.
    ``log``: WebKitWebDriver's and the browser's output."""
    from selenium import webdriver
    from selenium.webdriver.common.by import By

    assert DRIVER is not None and MINIBROWSER is not None
    options = webdriver.WebKitGTKOptions()
    options.binary_location = MINIBROWSER
    for arg in BROWSER_ARGS:
        options.add_argument(arg)
    with xvfb() as display:
        env = {**os.environ, "DISPLAY": display}  # the browser inherits the driver's
        service = webdriver.WebKitGTKService(executable_path=DRIVER, log_output=str(log),
                                             env=env)
        driver = webdriver.WebKitGTK(options=options, service=service)
        try:
            driver.set_script_timeout(scaled(30))
            driver.get(url)
            state = until(driver, STATE, lambda s: s["ready"] and s["connected"] == "connected",
                          scaled(30))
            connected = state["connected"]
            audio = base64.b64encode(mic.read_bytes()).decode()
            driver.execute_script(INJECT, FAKE_MIC % f'"{audio}"')
            driver.execute_script(INJECT, WATCH)
            driver.find_element(By.ID, "talk").click()
            state = until(driver, STATE, lambda s: s["done"] >= turns and "STT" in s["figures"]
                          and s["played"]["ended"] == s["played"]["chunks"] > 0,
                          scaled(30 + 30 * turns))
            state["connected"] = connected
            return state
        finally:
            driver.quit()
