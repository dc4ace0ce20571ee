"""The Hyperswarm bridge needs Node 18 or newer: an older one (Ubuntu 22.04's apt has Node 12)
is named as missing, so its tests skip and `sidecar host --swarm-key` says why, where they
failed inside node."""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_server.adapters.host.errors import HostError
from voice_server.adapters.host.swarm import bridge_available, connect_command


def test_a_node_older_than_18_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "node"
    node.write_text("#!/bin/sh\necho v12.22.9\n")
    node.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bridge_available() == f"Node.js 18 or newer is needed; {node} is v12.22.9"
    with pytest.raises(HostError, match="18 or newer"):
        connect_command("some-key")


def test_no_node_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bridge_available() == "Node.js is not installed"
