"""Which build of llama.cpp's CPU kernels the embedded model's worker loads.

scripts/install-llama-cpp.sh installs a portable baseline (x86-64-v3 or armv8) and the CPU
kernels again for two levels of ggml's own variant list (x86-64: AVX-512 ``skylakex`` and
``icelake``; arm64: ``armv8.2_2`` with the dot product, ``armv8.6_1`` with SVE and int8 matrix
multiply), each in a folder of its own with copies of the baseline's other libraries. On a
CPU with AVX-512 the ``icelake`` kernels read a prompt ~1.9x and generate ~1.2x as fast as the
baseline (docs/performance.md). Each variant's record names the ``/proc/cpuinfo`` flags it
needs; the best one this CPU has is loaded by pointing ``LLAMA_CPP_LIB_PATH`` (read by
llama-cpp-python when it is first imported) at its folder in the worker process only. If that
worker fails to start or dies of an illegal instruction, the supervisor starts it again on the
baseline (workers/supervisor.py), so a variant can cost a restart, never the model.

A build for the build machine's CPU alone (``-march=native``) is never chosen by us: that is
what segfaulted on a CPU with AVX-512 FP16 and AMX.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PORTABLE", "LlamaCpuBuild", "build_record", "choose_build", "cpu_flags"]

PORTABLE = "portable"  # the baseline: the libraries inside the llama_cpp package
RECORD = "voice_server-llama-build.json"


@dataclass(frozen=True)
class LlamaCpuBuild:
    """A build of the kernels: its name and folder (``None``: the package's own libraries)."""

    name: str = PORTABLE
    path: Path | None = None
    requires: tuple[str, ...] = field(default=())

    @property
    def env(self) -> dict[str, str]:
        """The worker's environment for it (nothing for the baseline)."""
        return {"LLAMA_CPP_LIB_PATH": str(self.path)} if self.path is not None else {}


def build_record(prefix: str | Path = sys.prefix) -> dict[str, Any] | None:
    """What scripts/install-llama-cpp.sh built into this environment, if it did."""
    try:
        return json.loads(Path(prefix, RECORD).read_text())
    except (OSError, ValueError):
        return None


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def variants(record: dict[str, Any] | None,
             prefix: str | Path = sys.prefix) -> list[LlamaCpuBuild]:
    """The record's variants, least demanding first, each with its folder."""
    return [LlamaCpuBuild(v["name"], Path(prefix, v["path"]), tuple(v["requires"]))
            for v in (record or {}).get("variants", [])]


def choose_build(wanted: str, record: dict[str, Any] | None, flags: set[str],
                 prefix: str | Path = sys.prefix) -> LlamaCpuBuild:
    """``wanted``: ``auto`` (the last variant whose flags the CPU has all of, else the
    baseline), ``portable``, or a variant's name (which must be built and fit this CPU).
    Raises ``ValueError`` with what is missing."""
    if wanted == PORTABLE:
        return LlamaCpuBuild()
    built = variants(record, prefix)
    runnable = [b for b in built if set(b.requires) <= flags]
    if wanted == "auto":
        return runnable[-1] if runnable else LlamaCpuBuild()
    named = next((b for b in built if b.name == wanted), None)
    if named is None:
        names = ", ".join([PORTABLE, *(b.name for b in built)])
        raise ValueError(f"llama.cpp CPU build {wanted!r} is not installed (installed: {names})")
    if named not in runnable:
        missing = " ".join(sorted(set(named.requires) - flags))
        raise ValueError(f"this CPU cannot run llama.cpp's {wanted} build (it lacks {missing})")
    return named
