"""In-memory session store: ids, TTL expiry on access and by sweep, incremental history."""

from __future__ import annotations

from voice_server.server.sessions import InMemorySessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_sessions_expire_after_ttl():
    """A session untouched for longer than the TTL is gone; a touched one lives on."""
    clock = Clock()
    store = InMemorySessionStore(ttl_s=60, clock=clock)
    a, b = await store.create(), await store.create()
    assert a.id != b.id and len(a.id) >= 22
    for session in (a, b):  # their connections ended; their time to live runs
        await store.release(session.id)
    clock.now += 50
    assert await store.get(a.id) is a  # touching refreshes
    clock.now += 50
    assert await store.get(a.id) is a
    assert await store.get(b.id) is None
    clock.now += 61
    assert store.sweep() == 1
    assert await store.count() == 0


async def test_history_appends_incrementally():
    """append_history adds at the end and refreshes the TTL."""
    clock = Clock()
    store = InMemorySessionStore(ttl_s=10, clock=clock)
    s = await store.create()
    await store.append_history(s, [{"role": "user", "content": "hi"}])
    clock.now += 9
    await store.append_history(s, [{"role": "assistant", "content": "hello"}])
    clock.now += 9
    got = await store.get(s.id)
    assert [m["content"] for m in got.history] == ["hi", "hello"]


async def test_lifecycle_is_idempotent():
    """async with starts the sweeper; closing twice is fine."""
    async with InMemorySessionStore(ttl_s=1, sweep_every_s=0.01) as store:
        await store.create()
    await store.aclose()
    await store.aclose()


async def test_a_session_in_which_nothing_was_said_goes_soon():
    """Issue 20, item 11: 20,000 silent sockets left 22,000 sessions for 30 minutes. A session
    in use never expires; once released, an empty one lasts `empty_ttl_s`, one with a
    conversation the full TTL."""
    clock = Clock()
    store = InMemorySessionStore(ttl_s=1800, empty_ttl_s=60, clock=clock)
    silent, talked, open_ = await store.create(), await store.create(), await store.create()
    await store.append_history(talked, [{"role": "user", "content": "hi"}])
    await store.release(silent.id)
    await store.release(talked.id)
    clock.now += 61
    assert store.sweep() == 1
    assert await store.get(silent.id) is None
    assert await store.get(talked.id) is talked
    assert await store.get(open_.id) is open_  # still held by its connection
    clock.now += 1800
    await store.release(open_.id)
    clock.now += 61
    assert await store.get(open_.id) is None
    assert await store.count() == 1
