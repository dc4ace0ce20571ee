"""Runs the Node unit tests of the web client (``node --test web_client/test/``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_llmrtc_js_node_unit_tests() -> None:
    """The whole Node test suite of the client passes (dedupe, backoff, state, routing, capture)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (apt-get install nodejs)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30,
                             check=False).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < 18:  # `node --test` came in Node 18
        pytest.skip(f"node {version} is too old for `node --test` (18 or newer; Ubuntu "
                    "22.04's apt has 12)")
    proc = subprocess.run(
        [node, "--test", "web_client/test/"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "# fail 0" in output
    passed = [line for line in output.splitlines() if line.startswith("# pass ")]
    assert passed and int(passed[-1].split()[-1]) >= 30, output[-2000:]
