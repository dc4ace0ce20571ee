"""Runs the WebRTC browser tests in a private network namespace when pytest itself is not in one
(``make test`` already is): ``scripts/in-private-netns.sh``, the one way the tests and benchmarks
make that namespace (as root, as a user, or through sudo where users may not), then pytest on
those files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.web.conftest import ROOT, needs_chromium, only_loopback

NETNS_FILES = ["tests/web/test_page_webrtc.py", "tests/web/test_page_e2e.py",
               "tests/web/test_reference_client.py"]
# what scripts/in-private-netns.sh (and sudo -n) say when no namespace can be made
_NOT_PERMITTED = ("is missing to make one", "a password is required")


@needs_chromium
def test_webrtc_browser_tests_pass_in_a_private_network_namespace() -> None:
    """The namespace-only browser tests pass when re-run in a private network namespace."""
    if only_loopback():
        pytest.skip("already in a private network namespace: those tests run directly")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    command = [str(ROOT / "scripts" / "in-private-netns.sh"), sys.executable, "-m", "pytest",
               "-q", "-rs", "-p", "no:cacheprovider", *NETNS_FILES]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "IN_NETNS_NONINTERACTIVE": "1"})
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(sign in out for sign in _NOT_PERMITTED):
        pytest.skip("this user may not make a network namespace here: " + out.strip()[-300:])
    assert proc.returncode == 0, out[-6000:]
    assert " passed" in out, out[-3000:]
