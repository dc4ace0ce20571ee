"""Benchmarks that open WebRTC peers run inside a private network namespace (loopback only)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.netns import only_loopback  # noqa: E402


def reexec_in_private_netns() -> None:
    """Re-run this script under ``unshare -n`` (``-rn`` when not root) unless already isolated."""
    if only_loopback():
        return
    if os.environ.get("VOICE_BENCH_IN_NETNS"):
        sys.exit("could not isolate the benchmark in a private network namespace")
    unshare = shutil.which("unshare")
    if unshare is None:
        sys.exit("this benchmark needs `unshare` (util-linux) to keep WebRTC on loopback")
    flag = "-n" if os.geteuid() == 0 else "-rn"
    cmd = " ".join(["ip link set lo up && exec", sys.executable, *map(_quote, sys.argv)])
    os.environ["VOICE_BENCH_IN_NETNS"] = "1"
    os.execv(unshare, [unshare, flag, "sh", "-c", cmd])


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"
