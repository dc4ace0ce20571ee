"""The host through the Hyperswarm bridge, on a local HyperDHT testnet (loopback only)."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
from pathlib import Path

import pytest

from voice_server.adapters.host import HostClient, HostError, HostOptions, HostServer
from voice_server.adapters.host.swarm import (
    BRIDGE_DIR,
    SwarmAnnouncer,
    bridge_available,
    connect_command,
)

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = 30.0

pytestmark = pytest.mark.skipif(bridge_available() is not None,
                                reason=f"Hyperswarm bridge unavailable: {bridge_available()}")


@pytest.fixture(scope="module")
async def testnet():
    """Three HyperDHT nodes bound to 127.0.0.1; yields their bootstrap list."""
    proc = await asyncio.create_subprocess_exec(
        "node", str(BRIDGE_DIR / "testnet.js"), "3", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(TIMEOUT):
            bootstrap = json.loads(await proc.stdout.readline())["bootstrap"]
        assert all(node.startswith("127.0.0.1:") for node in bootstrap.split(","))
        yield bootstrap
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_chat_through_the_swarm(fake_router, testnet):
    """A client finds the host by its key over the DHT and runs a full chat and an abort."""
    key = secrets.token_hex(16)
    async with HostServer(fake_router, HostOptions(host_name="swarm-host")) as server, \
            SwarmAnnouncer(key, tcp=("127.0.0.1", server.port), bootstrap=testnet,
                           direct=True) as announcer:
        assert len(announcer.server_id) >= 43  # base58 of 32 bytes
        client = await HostClient.spawn(connect_command(key, bootstrap=testnet, direct=True,
                                                        timeout_s=20),
                                        timeout_s=25)
        async with client:
            assert client.server_info == {"host_name": "swarm-host", "model": "fake-model",
                                          "status": "ready"}
            assert await client.ask("over the swarm") == "You said: over the swarm"
            assert client.finish_reason == "stop"
            with pytest.raises(HostError) as info:
                await client.ask("€" * 3000)
            assert info.value.code == "BAD_MESSAGE"


async def test_unknown_key_is_host_offline(testnet):
    """No host on the topic: the bridge gives up and the client reports HOST_OFFLINE."""
    command = connect_command("nobody-" + secrets.token_hex(8), bootstrap=testnet, direct=True,
                              timeout_s=1)
    with pytest.raises(HostError) as info:
        await HostClient.spawn(command, timeout_s=10)
    assert info.value.code == "HOST_OFFLINE"


async def test_commands_over_the_swarm(fake_openai, testnet):
    """`sidecar host --swarm-key` announces the host; `host-chat --swarm-key` reaches it."""
    key = secrets.token_hex(16)
    swarm = ["--swarm-key", key, "--swarm-bootstrap", testnet, "--swarm-direct"]
    host = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voice_server.cli", "sidecar", "host", "--port", "0", *swarm,
        "--llm-provider", "openai_compat", "--llm-base-url", fake_openai.base_url,
        "--llm-model", "fake-model", "--log-level", "WARNING", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(TIMEOUT):
            ready = json.loads(await host.stdout.readline())
        assert ready["server_id"]
        chat = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voice_server.cli", "host-chat", *swarm, "--timeout", "20",
            "through the swarm", cwd=ROOT, stdout=asyncio.subprocess.PIPE)
        async with asyncio.timeout(TIMEOUT):
            out, _ = await chat.communicate()
        assert (chat.returncode, out) == (0, b"You said: through the swarm\n")
    finally:
        host.send_signal(signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT):
            err = await host.stderr.read()
            assert await host.wait() == 0, err.decode()
