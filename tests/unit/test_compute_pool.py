"""The compute pool's admission (voice_server/compute.py): bounded, urgent work first, later
work never takes the last worker, and a cancelled waiter never loses or leaks a worker."""

from __future__ import annotations

import asyncio
import threading

import pytest

from voice_server.compute import ComputePool


async def _blocked(pool: ComputePool) -> tuple[asyncio.Task[None], threading.Event]:
    """Occupy the pool's only worker until the returned event is set."""
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(30)

    task = asyncio.create_task(pool.run(hold))
    assert await asyncio.to_thread(started.wait, 5)
    return task, gate


async def test_waiting_work_runs_urgent_first_then_in_arrival_order() -> None:
    async with ComputePool(1) as pool:
        busy, gate = await _blocked(pool)
        order: list[str] = []
        jobs = [asyncio.create_task(pool.run(order.append, name, urgent=name.startswith("u")))
                for name in ("later-1", "later-2", "urgent-1", "urgent-2")]
        await asyncio.sleep(0.05)
        assert order == []  # nobody overtook the running job
        gate.set()
        await asyncio.gather(busy, *jobs)
        assert order == ["urgent-1", "urgent-2", "later-1", "later-2"]


async def test_never_more_than_max_workers_at_once() -> None:
    async with ComputePool(2) as pool:
        running = 0
        peak = 0
        lock = threading.Lock()

        def work() -> None:
            nonlocal running, peak
            with lock:
                running += 1
                peak = max(peak, running)
            threading.Event().wait(0.02)
            with lock:
                running -= 1

        await asyncio.gather(*(pool.run(work, urgent=i % 2 == 0) for i in range(8)))
        assert peak == 2


@pytest.mark.parametrize("urgent", [False, True])
async def test_a_cancelled_waiter_gives_its_place_back(urgent: bool) -> None:
    async with ComputePool(1) as pool:
        busy, gate = await _blocked(pool)
        waiter = asyncio.create_task(pool.run(lambda: "never", urgent=urgent))
        await asyncio.sleep(0.01)
        waiter.cancel()
        gate.set()
        await busy
        assert await asyncio.wait_for(pool.run(lambda: "next"), 5) == "next"
        assert pool._running == [0, 0]  # nothing leaked, nothing counted twice


async def test_a_waiter_cancelled_as_it_is_handed_the_slot_passes_it_on() -> None:
    async with ComputePool(1) as pool:
        busy, gate = await _blocked(pool)
        first = asyncio.create_task(pool.run(lambda: "first"))
        second = asyncio.create_task(pool.run(lambda: "second"))
        await asyncio.sleep(0.01)
        hand_over = pool._admit_waiting

        def hand_over_then_cancel() -> None:  # in the same callback: `first` cannot run yet
            pool._admit_waiting = hand_over
            hand_over()  # the worker goes to `first`...
            first.cancel()  # ...which is cancelled before it can use it

        pool._admit_waiting = hand_over_then_cancel
        gate.set()
        await busy
        assert await asyncio.wait_for(second, 5) == "second"
        with pytest.raises(asyncio.CancelledError):
            await first
        assert pool._running == [0, 0]


async def test_later_work_leaves_a_worker_for_urgent_work() -> None:
    async with ComputePool(2) as pool:
        gate = threading.Event()
        started: list[str] = []

        def hold(name: str) -> None:
            started.append(name)
            gate.wait(30)

        later = [asyncio.create_task(pool.run(hold, f"later-{i}")) for i in range(2)]
        await asyncio.sleep(0.05)
        assert started == ["later-0"] and pool.running_jobs == 1  # the second one waits
        urgent = asyncio.create_task(pool.run(hold, "urgent", urgent=True))
        await asyncio.sleep(0.05)
        assert started == ["later-0", "urgent"]  # straight in, on the kept worker
        assert pool.urgent_jobs == 1 and pool.busy
        gate.set()
        await asyncio.gather(*later, urgent)
        assert sorted(started) == ["later-0", "later-1", "urgent"]
        assert pool.running_jobs == 0 and pool.urgent_jobs == 0


async def test_one_worker_still_runs_later_work() -> None:
    async with ComputePool(1) as pool:
        assert await asyncio.wait_for(pool.run(lambda: "done"), 5) == "done"
