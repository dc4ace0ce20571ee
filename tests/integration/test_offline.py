"""Nothing phones home (issue 17): the server, its model workers included, runs a whole spoken
turn without one attempt to reach an address beyond loopback (no DNS query, no telemetry).
Every network system call of the server process tree is recorded with strace."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import websockets

from tests.conftest import scaled
from tests.integration.test_ws_turn import audio_message

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


async def test_a_whole_turn_reaches_nothing_beyond_loopback(tmp_path: Path, make_speech) -> None:
    log = tmp_path / "server.trace"
    server = _strace(VOICE_SERVER, "serve", "--port", "0", "--log-level", "WARNING", log=log,
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        async with asyncio.timeout(scaled(180)):
            while not (line := await asyncio.to_thread(server.stdout.readline)).startswith(
                    "voice-server ready"):
                assert line, "the server ended before it was ready"
        url = re.search(r"ws://\S+/ws", line).group(0)
        async with websockets.connect(url, max_size=None) as ws:
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(json.dumps(audio_message(make_speech("What is the capital of France?"))))
            seen = []
            async with asyncio.timeout(scaled(120)):
                while not seen or seen[-1] != "tts-complete":
                    seen.append(json.loads(await ws.recv())["type"])
        assert {"transcript", "llm", "tts-chunk"} <= set(seen), seen
    finally:
        for child in psutil.Process(server.pid).children():  # the server, traced by strace
            child.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    assert addresses_beyond_loopback(log.read_text()) == []
