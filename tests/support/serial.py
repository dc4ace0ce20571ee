"""Tests marked ``serial`` run alone while the suite runs on several pytest-xdist workers.

``make test`` runs the suite on two workers (``-n 2``): most of its time is speech played in
real time, so the second core was idle half the time. A few tests measure what the CPU gives
(a busy loop that must make the engine drop a thread, an 8 KB prompt on the embedded model);
beside another worker's test they would measure that test instead. So every test holds a lock
for its whole run (setup, call, teardown): shared for a test, exclusive for a ``serial`` one.

``flock`` gives a waiting exclusive lock no priority over new shared ones, so a worker that
starts its next test at once could keep a serial test waiting forever. Hence a turnstile: a
test passes through it (held for a moment) before it takes its shared lock, and a serial test
holds it while it waits for, and runs with, the exclusive lock, so no new test starts then.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["hold_test_lock", "lock_dir"]


def lock_dir() -> Path | None:
    """The lock files, shared by the workers; None outside pytest-xdist. One folder per user,
    not per run: nothing piles up in the temporary folder, and two runs at once keep each
    other's serial tests alone too."""
    if not os.environ.get("PYTEST_XDIST_TESTRUNUID"):
        return None
    path = Path(tempfile.gettempdir()) / f"voice-server-test-locks-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


@contextlib.contextmanager
def hold_test_lock(directory: Path | None, *, serial: bool) -> Iterator[None]:
    """Hold the run's lock around one test: exclusive when ``serial``, else shared."""
    if directory is None:
        yield
        return
    turnstile, running = directory / "turnstile", directory / "running"
    if serial:
        with _flock(turnstile, fcntl.LOCK_EX), _flock(running, fcntl.LOCK_EX):
            yield
        return
    with contextlib.ExitStack() as held:
        with _flock(turnstile, fcntl.LOCK_EX):  # pass through
            held.enter_context(_flock(running, fcntl.LOCK_SH))
        yield
