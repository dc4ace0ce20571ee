"""The lock that lets a ``serial`` test run alone on a suite spread over workers
(tests/support/serial.py): it waits for the running tests, and no new test starts meanwhile."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.support.serial import hold_test_lock


def test_a_serial_test_waits_for_the_running_one_and_goes_before_the_next(
        tmp_path: Path) -> None:
    order: list[str] = []
    running, release = threading.Event(), threading.Event()

    def test(name: str, serial: bool, hold_s: float = 0.0) -> None:
        with hold_test_lock(tmp_path, serial=serial):
            order.append(f"{name} starts")
            if name == "first":
                running.set()
                release.wait(10)
            time.sleep(hold_s)
            order.append(f"{name} ends")

    first = threading.Thread(target=test, args=("first", False))
    first.start()
    assert running.wait(10)
    serial = threading.Thread(target=test, args=("serial", True, 0.2))
    serial.start()
    time.sleep(0.2)  # the serial test waits for the first, holding the turnstile
    nxt = threading.Thread(target=test, args=("next", False))
    nxt.start()
    time.sleep(0.2)
    assert order == ["first starts"]  # neither started beside the running test
    release.set()
    for thread in (first, serial, nxt):
        thread.join(10)
    assert order == ["first starts", "first ends", "serial starts", "serial ends",
                     "next starts", "next ends"]


def test_tests_that_are_not_serial_run_side_by_side(tmp_path: Path) -> None:
    inside = threading.Barrier(2, timeout=10)  # broken unless both hold the lock at once

    def test() -> None:
        with hold_test_lock(tmp_path, serial=False):
            inside.wait()

    threads = [threading.Thread(target=test) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert not inside.broken


def test_without_workers_there_is_no_lock(monkeypatch) -> None:
    from tests.support.serial import lock_dir

    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    assert lock_dir() is None
    with hold_test_lock(None, serial=True):
        pass
