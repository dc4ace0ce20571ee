"""Runs the WebRTC browser tests in a private network namespace when pytest itself is not in one
(``make test`` already is): ``unshare -n``, loopback up, then pytest on those files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.web.conftest import ROOT, needs_chromium, only_loopback

NETNS_FILES = ["tests/web/test_page_webrtc.py", "tests/web/test_page_e2e.py",
               "tests/web/test_reference_client.py"]


@needs_chromium
def test_webrtc_browser_tests_pass_in_a_private_network_namespace() -> None:
    """The namespace-only browser tests pass when re-run under ``unshare -n``."""
    if only_loopback():
        pytest.skip("already in a private network namespace: those tests run directly")
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    prefix = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    inner = (f"ip link set lo up && exec {sys.executable} -m pytest -q -rs -p no:cacheprovider "
             + " ".join(NETNS_FILES))
    proc = subprocess.run([*prefix, "sh", "-c", inner], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and "unshare" in out and "Operation not permitted" in out:
        pytest.skip("network namespaces are not permitted here")
    assert proc.returncode == 0, out[-6000:]
    assert " passed" in out, out[-3000:]
