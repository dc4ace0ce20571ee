"""Python side of the Hyperswarm bridge (``hyperswarm/bridge.js``, Node).

The original host talks to clients over Hyperswarm, which exists only for Node. The
bridge moves bytes only: ``serve`` announces a topic and pipes each peer to this host's TCP port
or Unix socket; ``connect`` finds the host and pipes its own stdin/stdout to it, so that
``HostClient.spawn(connect_command(...))`` speaks the protocol through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..kit import AsyncService
from .errors import HostError

__all__ = ["BRIDGE_DIR", "SwarmAnnouncer", "bridge_available", "connect_command",
           "stop_process"]

BRIDGE_DIR = Path(__file__).resolve().parent / "hyperswarm"
_INSTALL_HINT = f"install it with: npm ci --prefix {BRIDGE_DIR}"


NODE_MAJOR = 18  # the bridge's packages' "engines" (Ubuntu 22.04's apt has Node 12)


def bridge_available() -> str | None:
    """``None`` if Node (18 or newer) and the bridge's packages are installed, else what is
    missing."""
    node = shutil.which("node")
    if node is None:
        return "Node.js is not installed"
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout.strip()
        major = int(version.lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.SubprocessError):
        return f"{node} does not say its version"
    if major < NODE_MAJOR:
        return f"Node.js {NODE_MAJOR} or newer is needed; {node} is {version}"
    if not (BRIDGE_DIR / "node_modules" / "hyperswarm").is_dir():
        return f"the Hyperswarm bridge's npm packages are missing; {_INSTALL_HINT}"
    return None


def _node(*args: str) -> list[str]:
    missing = bridge_available()
    if missing:
        raise HostError(missing, code="CONNECT_FAILED")
    return ["node", str(BRIDGE_DIR / "bridge.js"), *args]


def _swarm_args(key: str, bootstrap: str | None, direct: bool) -> list[str]:
    return ["--key", key, *(["--bootstrap", bootstrap] if bootstrap else []),
            *(["--direct"] if direct else [])]


def connect_command(key: str, *, bootstrap: str | None = None, direct: bool = False,
                    timeout_s: float = 15.0) -> list[str]:
    """The bridge command a client spawns to reach the host announced under ``key``.

    ``direct``: this node needs no holepunching (a loopback testnet); see ``bridge.js``.
    """
    return _node("connect", *_swarm_args(key, bootstrap, direct), "--timeout",
                 f"{timeout_s:g}")


class SwarmAnnouncer(AsyncService):
    """``async with SwarmAnnouncer(key, tcp=("127.0.0.1", port)) as a: a.server_id``.

    ``bootstrap`` is a ``host:port,...`` list of DHT nodes (a local testnet in tests); without
    it the public Hyperswarm DHT is used. ``direct`` declares the node reachable without
    holepunching (true on a loopback testnet).
    """

    def __init__(self, key: str, *, tcp: tuple[str, int] | None = None,
                 unix_path: str | None = None, bootstrap: str | None = None,
                 direct: bool = False) -> None:
        if (tcp is None) == (unix_path is None):
            raise ValueError("give exactly one of tcp or unix_path")
        target = ["--unix", unix_path] if unix_path else ["--tcp", f"{tcp[0]}:{tcp[1]}"]
        self._argv = _node("serve", *_swarm_args(key, bootstrap, direct), *target)
        self._process: asyncio.subprocess.Process | None = None
        self.server_id: str | None = None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            *self._argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert self._process.stdout is not None
        try:
            async with asyncio.timeout(30.0):
                line = await self._process.stdout.readline()
            ready: dict[str, Any] = json.loads(line) if line else {}
        except (TimeoutError, ValueError):
            ready = {}
        if not ready.get("ready"):
            await self.aclose()
            raise HostError("the Hyperswarm bridge did not start", code="CONNECT_FAILED")
        self.server_id = ready["server_id"]

    async def aclose(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        await stop_process(process)
        with contextlib.suppress(Exception):
            assert process.stderr is not None
            await asyncio.wait_for(process.stderr.read(), 1.0)


async def stop_process(process: asyncio.subprocess.Process, timeout_s: float = 5.0) -> None:
    """Terminate a bridge process; kill it if it has not exited within ``timeout_s``."""
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
