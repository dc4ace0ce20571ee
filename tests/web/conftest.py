"""Shared pieces of the browser tests: Chromium flags, the loopback-only check, fake mics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ifaddr
import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "web"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--use-fake-device-for-media-stream",
                 "--autoplay-policy=no-user-gesture-required",
                 "--disable-features=WebRtcHideLocalIpsWithMdns",
                 "--allow-loopback-in-peer-connection"]


def only_loopback() -> bool:
    """True inside a private network namespace (``unshare -n``): loopback is all there is."""
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            addr = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            if not (addr.startswith("127.") or addr == "::1"):
                return False
    return True


needs_netns = pytest.mark.skipif(
    not only_loopback(), reason="WebRTC in Chromium runs in a private network namespace "
    "(make test; or tests/web/test_netns.py re-runs it there)")
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                    reason="needs Debian's chromium (apt-get install chromium)")


def screenshot_path(name: str) -> str:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return str(ARTIFACTS / name)


async def launch_chromium(pw: Any, mic_wav: Path, *, loop: bool, fake_ui: bool = True) -> Any:
    """Debian's Chromium with a fake mic playing ``mic_wav`` (once, or looping)."""
    args = [*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={mic_wav}"
            + ("" if loop else "%noloop")]
    if fake_ui:
        args.append("--use-fake-ui-for-media-stream")
    return await pw.chromium.launch(executable_path=str(CHROMIUM), args=args)
