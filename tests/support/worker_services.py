"""Small services for the worker tests: they run in a real worker process, without models."""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any


class EchoService:
    """Answers, fails, sleeps and crashes on request."""

    def __init__(self, *, fail_at_start: str | None = None) -> None:
        if fail_at_start:
            raise RuntimeError(fail_at_start)
        self._stops: dict[int, threading.Event] = {}

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid()}

    def close(self) -> None:
        for stop in self._stops.values():
            stop.set()

    def echo(self, value: Any) -> Any:
        return value

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def sleep(self, seconds: float) -> str:
        time.sleep(seconds)
        return "slept"

    def segfault(self) -> None:
        """A real crash in native code: read address 0."""
        ctypes.string_at(0)

    def abort_saying(self, message: str) -> None:
        """Die the way native code does on a failed assertion: say why on stderr, abort."""
        os.write(2, f"{message}\n".encode())
        os.abort()

    def kill_self(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def illegal_instruction(self) -> None:
        """Run an instruction the CPU refuses (x86 ``ud2``, arm64 ``udf #0``), as code built
        for features this CPU lacks would: the process dies of SIGILL."""
        code = {"x86_64": b"\x0f\x0b", "aarch64": b"\x00\x00\x00\x00"}.get(os.uname().machine)
        if code is None:
            os.kill(os.getpid(), signal.SIGILL)
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        page.write(code)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        ctypes.CFUNCTYPE(None)(address)()

    def environment(self, name: str) -> str | None:
        return os.environ.get(name)

    def count(self, emit: Callable[[Any], None], rid: int, n: int, every_s: float) -> None:
        stop = self._stops.setdefault(rid, threading.Event())

        def run() -> None:
            for i in range(n):
                if stop.wait(every_s):
                    return
                emit(i)
            emit("done")

        threading.Thread(target=run, daemon=True).start()

    def stop(self, rid: int) -> None:
        if (event := self._stops.pop(rid, None)) is not None:
            event.set()
