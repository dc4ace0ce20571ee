"""The bundled page in headless Firefox against the real voice_server: a second browser engine
(Gecko's WebRTC, its SDP and ICE, its Web Audio) beside the Chromium tests.

Firefox offers no loopback ICE candidate (``media.peerconnection.ice.loopback`` did not make
it, whatever else was set), and in a namespace with no default route it gathers none at all.
So the conversation (``firefox_session.py``) runs in a network namespace this test makes: a
veth pair with 10.99.0.1 and a default route to its other end, nothing beyond. That takes
root; the test is skipped otherwise. Web Audio needs a sound server: a PulseAudio with a null
sink, on a Unix socket, for the test's run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import scaled
from tests.web.conftest import LONG_REPLY, ROOT, mic_file

# Debian's: Ubuntu's `firefox` is a snap, whose confinement keeps it from a profile in /tmp
FIREFOX = shutil.which("firefox-esr")
PULSEAUDIO = shutil.which("pulseaudio")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(FIREFOX is None, reason="needs Firefox (apt-get install firefox-esr)"),
    pytest.mark.skipif(PULSEAUDIO is None, reason="needs PulseAudio for Firefox's Web Audio "
                       "(apt-get install pulseaudio)"),
    pytest.mark.skipif(importlib.util.find_spec("marionette_driver") is None,
                       reason="needs marionette-driver (pip install -e '.[test]')"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to make the network namespace "
                       "with an interface beside loopback that Firefox's WebRTC needs"),
]

# the namespace: loopback, and a veth pair whose one end has 10.99.0.1 and the default route
NAMESPACE = ("ip link set lo up && ip link add ff0 type veth peer name ff1 && "
             "ip addr add 10.99.0.1/24 dev ff0 && ip link set ff0 up && ip link set ff1 up && "
             "ip route add default via 10.99.0.2 dev ff0 && exec \"$@\"")


@contextlib.contextmanager
def pulseaudio(folder: Path) -> Iterator[str]:
    """A PulseAudio with one null sink on a Unix socket in ``folder``; yields PULSE_SERVER."""
    socket = folder / "native"
    env = {**os.environ, "HOME": str(folder), "XDG_RUNTIME_DIR": str(folder)}
    process = subprocess.Popen(
        [PULSEAUDIO, "-n", "--daemonize=no", "--exit-idle-time=-1", "--disable-shm=true",
         "-L", "module-null-sink sink_name=null",
         "-L", f"module-native-protocol-unix socket={socket} auth-anonymous=1",
         f"--log-target=file:{folder / 'pulse.log'}"], env=env)
    try:
        deadline = time.monotonic() + scaled(10)
        while not socket.exists():
            assert process.poll() is None, (folder / "pulse.log").read_text()
            assert time.monotonic() < deadline, "PulseAudio did not start"
            time.sleep(0.1)
        yield f"unix:{socket}"
    finally:
        process.terminate()
        process.wait(10)


def converse(tmp_path: Path, mic: Path, replies: list[str], *,
             transport: str = "WebRTC") -> dict[str, Any]:
    """Run ``firefox_session`` in the test's namespace with a sound server; what the page
    showed, after checking that Firefox logged no JavaScript error of the page's and talked
    over ``transport`` (WebRTC: the agent's voice arrived on the inbound track)."""
    log = tmp_path / "firefox.log"
    pulse_dir = tmp_path / "pulse"
    pulse_dir.mkdir()
    with pulseaudio(pulse_dir) as pulse_server:
        run = subprocess.run(
            ["unshare", "-n", "sh", "-c", NAMESPACE, "sh", sys.executable, "-m",
             "tests.web.firefox_session", "--mic", str(mic), "--log", str(log),
             *(arg for reply in replies for arg in ("--reply", reply)),
             *(["--query", "&transport=ws"] if transport == "WebSocket" else [])],
            cwd=ROOT, env={**os.environ, "PULSE_SERVER": pulse_server}, capture_output=True,
            text=True, timeout=scaled(240))
    assert run.returncode == 0, run.stderr[-3000:]
    errors = [line for line in log.read_text(errors="replace").splitlines()
              if line.startswith("JavaScript error: http://127.0.0.1")]
    assert errors == [], errors
    page = json.loads(run.stdout.strip().splitlines()[-1])
    assert page["connected"] == "connected", page
    assert page["transport"] == transport, page
    assert page["opened"] == 1, page
    if transport == "WebRTC":
        inbound = page["inbound"]
        assert inbound and inbound["packets"] > 50 and inbound["energy"] > 0, page
    return page


def test_firefox_talks_with_the_server(make_speech, tmp_path: Path) -> None:
    """Speak a question in Firefox: the page connects over WebRTC, shows the transcript and
    the agent's reply with the server's figures, and the reply's voice arrives on the inbound
    audio track; the page logs no JavaScript error."""
    reply = "The moon is about four hundred thousand kilometres away."
    mic = mic_file(tmp_path, make_speech, ("How far away is the moon?", 1.5, 2.0))
    page = converse(tmp_path, mic, [reply])
    assert len(page["user"]) == 1 and "moon" in page["user"][0].lower(), page
    assert page["agent"] == [reply], page
    assert page["done"] == 1 and page["interrupted"] == 0, page
    assert "STT" in page["figures"], page


def test_firefox_barge_in_stops_the_agent(make_speech, tmp_path: Path) -> None:
    """A second question while the agent speaks, in Firefox: the reply is cut (the server's
    tts-cancelled marks it interrupted) and the second question is answered."""
    mic = mic_file(tmp_path, make_speech, ("What is the capital of France?", 1.5, 4.5),
                   ("And what about Germany?", 0.0, 2.5))
    page = converse(tmp_path, mic, [LONG_REPLY, "Berlin is the capital of Germany."])
    assert page["done"] == 2 and page["interrupted"] == 1, page
    cut, answer = page["agent"]
    assert cut and LONG_REPLY.startswith(cut[:20]), page
    assert answer == "Berlin is the capital of Germany.", page
    assert "germany" in page["user"][-1].lower(), page


def test_firefox_websocket_fallback_talks_with_the_server(make_speech, tmp_path: Path) -> None:
    """The WebSocket fallback in Firefox (``?transport=ws``): its AudioWorklet recorder cuts
    the question from the microphone, the server hears it and the reply comes back."""
    mic = mic_file(tmp_path, make_speech, ("How far away is the moon?", 1.5, 2.0))
    page = converse(tmp_path, mic, ["The moon is far."], transport="WebSocket")
    assert len(page["user"]) == 1 and "moon" in page["user"][0].lower(), page
    assert page["agent"] == ["The moon is far."], page
