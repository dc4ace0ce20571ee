"""Benchmarks that open WebRTC peers run inside a private network namespace (loopback only)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.netns import only_loopback  # noqa: E402


def reexec_in_private_netns() -> None:
    """Re-run this script in a private network namespace (scripts/in-private-netns.sh: as
    root, as a user, or through sudo where users may not make one) unless already isolated."""
    if only_loopback():
        return
    if os.environ.get("VOICE_BENCH_IN_NETNS"):
        sys.exit("could not isolate the benchmark in a private network namespace")
    if shutil.which("unshare") is None:
        sys.exit("this benchmark needs `unshare` (util-linux) to keep WebRTC on loopback")
    script = str(Path(__file__).resolve().parents[1] / "scripts" / "in-private-netns.sh")
    carried = [f"{key}={value}" for key, value in os.environ.items()  # sudo drops them
               if key.startswith(("VOICE_SERVER_", "BENCH_", "PYTHON"))]
    os.execv(script, [script, "env", *carried, "VOICE_BENCH_IN_NETNS=1", sys.executable,
                      *sys.argv])
