"""Nothing phones home (issue 17): the server, its model workers included, runs a whole spoken
turn without one attempt to reach an address beyond loopback (no DNS query, no telemetry).
Every network system call of the server process tree is recorded with strace, and the cache
folder where onnxruntime keeps its telemetry queue stays empty.

onnxruntime (1.32) sends telemetry unless ``ORT_DISABLE_TELEMETRY=1`` is in the environment
when it is imported (``voice_server.workers.OFFLINE_ENVIRONMENT``). Its upload comes ~30 s
after the import, often after a short test's turn; the queue it writes at import is the
witness that does not depend on timing."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import websockets

from tests.conftest import scaled
from tests.integration.test_ws_turn import audio_message
from tests.rtc.peer import RtcClient
from tests.support.netns import only_loopback
from voice_server.workers import OFFLINE_ENVIRONMENT

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("strace") is None,
                                 reason="strace is needed (make test installs it)")]

VOICE_SERVER = str(Path(sys.executable).with_name("voice-server"))
NETWORK_CALLS = "trace=connect,sendto,sendmsg,sendmmsg"
_ADDRESS = re.compile(r'inet_(?:addr|pton)\((?:AF_INET6?, )?"([^"]+)"\)')


def _strace(*command: str, log: Path, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(["strace", "-f", "-qq", "--seccomp-bpf", "-e", NETWORK_CALLS,
                             "-e", "signal=none", "-o", str(log), *command], text=True, **kw)


def addresses_beyond_loopback(trace: str) -> list[str]:
    """The IP addresses that a system call in ``trace`` tried to reach, loopback excluded."""
    found = []
    for line in trace.splitlines():
        for address in _ADDRESS.findall(line):
            ip = ipaddress.ip_address(address)
            mapped = getattr(ip, "ipv4_mapped", None)
            if not (ip.is_loopback or ip.is_unspecified or (mapped and mapped.is_loopback)):
                found.append(f"{address}: {line.strip()}")
    return found


def test_the_trace_sees_an_attempt(tmp_path: Path) -> None:
    """Control: a DNS query attempt is caught (so an empty finding below means something)."""
    log = tmp_path / "control.trace"
    probe = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "try: s.sendto(b'x', ('10.255.255.53', 53))\nexcept OSError: pass")
    _strace(sys.executable, "-c", probe, log=log).wait(timeout=60)
    assert any("10.255.255.53" in a for a in addresses_beyond_loopback(log.read_text()))


def _files_under(folder: Path) -> list[str]:
    """The files in ``folder`` (none when it does not exist)."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# onnxruntime starts no telemetry where one of these is set (it takes them for a CI service's),
# so a CI run would not see what a user's machine does; they are the names in its library.
_CI_MARKERS = {"CI", "TF_BUILD", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI", "TRAVIS",
               "JENKINS_URL", "CODEBUILD_BUILD_ID", "BUILDKITE", "TEAMCITY_VERSION", "APPVEYOR",
               "BITBUCKET_BUILD_NUMBER"}


def _as_a_user_runs_it(cache: Path) -> dict[str, str]:
    """Our environment as a user's is: without the variable that turns onnxruntime's
    telemetry off and without the marks of a CI service; ``cache`` as the cache folder
    (``XDG_CACHE_HOME``)."""
    dropped = _CI_MARKERS | {"ORT_DISABLE_TELEMETRY"}
    return {**{k: v for k, v in os.environ.items() if k not in dropped},
            "XDG_CACHE_HOME": str(cache)}


def _cache_after(code: str, cache: Path, **env: str) -> list[str]:
    """The files that ``python -c code`` leaves in its cache folder."""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=scaled(60),
                   env={**_as_a_user_runs_it(cache), **env})
    return _files_under(cache)


@pytest.mark.skipif(not only_loopback(), reason="onnxruntime's telemetry is turned on here: "
                    "run it where nothing beyond loopback is reachable (make test)")
def test_onnxruntime_keeps_telemetry_unless_its_variable_is_set(tmp_path: Path) -> None:
    """Control, and a check on the installed onnxruntime: imported as such, it starts its
    telemetry (a device id and an event queue in the user's cache); its
    ``disable_telemetry_events()`` does not undo that; ``OFFLINE_ENVIRONMENT`` prevents it. If
    an upgrade stops writing the queue, this fails: see whether the variable is still needed."""
    queue = "Microsoft/DeveloperTools/.onnxruntime/deviceid"
    assert queue in _cache_after("import onnxruntime", tmp_path / "plain")
    assert queue in _cache_after("import onnxruntime; onnxruntime.disable_telemetry_events()",
                                 tmp_path / "disabled")
    assert _cache_after("import onnxruntime", tmp_path / "offline", **OFFLINE_ENVIRONMENT) == []
    assert _cache_after("import onnxruntime", tmp_path / "ci", CI="true") == [], \
        "onnxruntime no longer skips telemetry on a CI service: check _CI_MARKERS"


@contextlib.asynccontextmanager
async def _traced_server(tmp_path: Path, *flags: str) -> AsyncIterator[str]:
    """``voice-server serve`` under strace, as a user starts it (nothing in its environment
    turns telemetry off); yields its WebSocket URL. On leaving, after it stopped: no system
    call of its process tree tried an address beyond loopback, and its cache folder holds no
    telemetry queue."""
    log, cache = tmp_path / "server.trace", tmp_path / "cache"
    server = _strace(VOICE_SERVER, "serve", "--port", "0", "--log-level", "WARNING", *flags,
                     log=log, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     env=_as_a_user_runs_it(cache))
    try:
        async with asyncio.timeout(scaled(180)):
            while not (line := await asyncio.to_thread(server.stdout.readline)).startswith(
                    "voice-server ready"):
                assert line, "the server ended before it was ready"
        yield re.search(r"ws://\S+/ws", line).group(0)
    finally:
        for child in psutil.Process(server.pid).children():  # the server, traced by strace
            child.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    assert addresses_beyond_loopback(log.read_text()) == []
    assert _files_under(cache) == []  # no telemetry queue


async def test_a_whole_turn_reaches_nothing_beyond_loopback(tmp_path: Path, make_speech) -> None:
    async with _traced_server(tmp_path) as url, \
            websockets.connect(url, max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "ready"
        await ws.send(json.dumps(audio_message(make_speech("What is the capital of France?"))))
        seen = []
        async with asyncio.timeout(scaled(120)):
            while not seen or seen[-1] != "tts-complete":
                seen.append(json.loads(await ws.recv())["type"])
    assert {"transcript", "llm", "tts-chunk"} <= set(seen), seen


@pytest.mark.skipif(not only_loopback(), reason="WebRTC runs only in a private network "
                    "namespace (make test)")
async def test_a_webrtc_turn_reaches_nothing_beyond_loopback(tmp_path: Path,
                                                             make_speech) -> None:
    """The same over WebRTC (ICE on 127.0.0.1, no ICE servers configured): aiortc's default
    STUN server (Google's) is never asked, and the answer's audio arrives."""
    async with _traced_server(tmp_path, "--ice-host-addresses", "127.0.0.1",
                              "--ice-candidate-allow", "127.0.0.1") as url, \
            RtcClient(url) as client:
        await client.negotiate()
        client.say(make_speech("What is the capital of France?", rate=48000, pad=(1.0, 1.5)))
        await client.wait_for("tts-complete", timeout=scaled(120))
        assert client.messages("transcript")
        assert max(int(np.abs(pcm).max()) for _, pcm in client.heard) > 1000  # the answer
