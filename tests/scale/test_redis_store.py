"""RedisSessionStore against a real redis-server: incremental writes, TTL, leases, hand-over."""

from __future__ import annotations

import asyncio
import json

from redis.asyncio import Redis

from voice_server.server.redis_store import RedisSessionStore


async def test_writes_are_incremental_and_shared(redis_proc):
    """A turn is an RPUSH; state/meta a HSET; another instance reads the same session."""
    async with RedisSessionStore(redis_proc.url, ttl_s=60) as a, \
            RedisSessionStore(redis_proc.url, ttl_s=60) as b:
        session = await a.create()
        session.meta["playbook"] = "pizza"
        session.state["stage"] = "greet"
        await a.save(session)
        await a.append_history(session, [{"role": "user", "content": "hi"},
                                         {"role": "assistant", "content": "hello"}])
        await a.append_history(session, [{"role": "user", "content": "bye"}])
        raw = Redis.from_url(redis_proc.url, decode_responses=True)
        try:
            items = await raw.lrange(f"vs:h:{session.id}", 0, -1)
            assert [json.loads(i)["content"] for i in items] == ["hi", "hello", "bye"]
            assert 0 < await raw.pttl(f"vs:h:{session.id}") <= 60_000
            assert 0 < await raw.pttl(f"vs:s:{session.id}") <= 60_000
            assert await raw.get(f"vs:lease:{session.id}") == a.instance_id
        finally:
            await raw.aclose()
        seen = await b.get(session.id)
        assert seen is not None and seen is not session
        assert seen.history == session.history
        assert seen.meta == {"playbook": "pizza"} and seen.state == {"stage": "greet"}
        assert await b.get("no-such-session") is None


async def test_claim_asks_the_owner_to_let_go(redis_proc):
    """B claims a session A owns: A's release hook runs, then B owns it with A's last writes."""
    async with RedisSessionStore(redis_proc.url, ttl_s=60) as a, \
            RedisSessionStore(redis_proc.url, ttl_s=60) as b:
        session = await a.create()
        released: list[str] = []

        async def on_release(session_id: str) -> None:
            # the old owner persists its last turn before letting go
            await a.append_history(session, [{"role": "user", "content": "last words"}])
            released.append(session_id)

        a.on_release = on_release
        claimed = await b.claim(session.id)
        assert released == [session.id]
        assert claimed is not None
        assert claimed.history == [{"role": "user", "content": "last words"}]
        assert session.id in b._owned and session.id not in a._owned
        # B is now the only writer; A sees B's writes
        await b.append_history(claimed, [{"role": "assistant", "content": "from b"}])
        again = await a.get(session.id)
        assert again is not None and len(again.history) == 2


async def test_crashed_owner_lease_expires(redis_proc):
    """An owner that never answers (gone) loses the session once its lease expires."""
    a = RedisSessionStore(redis_proc.url, ttl_s=60, lease_s=0.6)
    await a.__aenter__()
    session = await a.create()
    await a.aclose()  # stops renewing and answering, then "crashes": the lease is still there
    await a._redis.set(f"vs:lease:{session.id}", a.instance_id, px=600)
    async with RedisSessionStore(redis_proc.url, ttl_s=60, claim_wait_s=5) as b:
        claimed = await b.claim(session.id)
        assert claimed is not None and claimed.id == session.id


async def test_unknown_and_expired_sessions(redis_proc):
    async with RedisSessionStore(redis_proc.url, ttl_s=0.3) as a, \
            RedisSessionStore(redis_proc.url, ttl_s=60) as b:
        assert await b.claim("never-existed") is None
        session = await a.create()
        await a.release(session.id)
        assert await b.get(session.id) is not None
        raw = Redis.from_url(redis_proc.url)
        try:  # wait for Redis to expire the keys (its own TTL, not ours)
            async with asyncio.timeout(5):
                while await raw.exists(f"vs:s:{session.id}"):  # noqa: ASYNC110 - no event
                    await asyncio.sleep(0.05)
        finally:
            await raw.aclose()
        assert await b.get(session.id) is None
        assert await b.claim(session.id) is None


async def test_a_session_in_which_nothing_was_said_is_kept_briefly(redis_proc):
    """Issue 20, item 11: an empty session's keys expire after `empty_ttl_s`; once something
    is said, after the full TTL."""
    async with RedisSessionStore(redis_proc.url, ttl_s=1800, empty_ttl_s=60) as store:
        silent, talked = await store.create(), await store.create()
        await store.save(silent)
        await store.append_history(talked, [{"role": "user", "content": "hi"}])
        await store.save(talked)
        raw = Redis.from_url(redis_proc.url, decode_responses=True)
        try:
            assert 0 < await raw.pttl(f"vs:s:{silent.id}") <= 60_000
            assert 60_000 < await raw.pttl(f"vs:s:{talked.id}") <= 1_800_000
            assert 60_000 < await raw.pttl(f"vs:h:{talked.id}") <= 1_800_000
        finally:
            await raw.aclose()


async def test_the_redis_connection_pool_is_bounded(redis_proc):
    """Issue 20, item 13: a burst of sessions opened one connection each. The pool holds at
    most `max_connections`; more callers wait for one and all succeed."""
    async with RedisSessionStore(redis_proc.url, ttl_s=60, max_connections=4) as store:
        sessions = await asyncio.gather(*(store.create() for _ in range(40)))
        assert len({s.id for s in sessions}) == 40
        raw = Redis.from_url(redis_proc.url, decode_responses=True)
        try:
            assert all([await raw.exists(f"vs:s:{s.id}") for s in sessions])
            ours = [c for c in await raw.client_list()  # what Redis itself sees
                    if c["name"] == f"voice_server-{store.instance_id}"]
            assert 1 <= len(ours) <= 4, ours
        finally:
            await raw.aclose()


async def test_a_redis_restart_loses_no_write(redis_proc):
    """A CI run lost a turn: Redis had restarted, the store's pooled connections were closed,
    the first write on one failed, and closing the connection forgot the unwritten turn.
    Now a closed pooled connection is replaced and the command sent again, a session Redis
    lost (restarted empty) is written back in full, and a release writes back first."""
    user = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    more = [{"role": "user", "content": "three"}, {"role": "assistant", "content": "four"}]
    async with RedisSessionStore(redis_proc.url, ttl_s=60, probe_every_s=60, heartbeat_s=240,
                                 lease_s=180) as a, \
            RedisSessionStore(redis_proc.url, ttl_s=60) as b:  # a probes when the test says
        session = await a.create()
        await a.append_history(session, user)
        await asyncio.gather(*(a.get(f"warm-{i}") for i in range(8)))  # several pooled
        await redis_proc.stop()
        await redis_proc.start()  # no persistence: empty, every pooled connection closed
        await a.append_history(session, more)
        assert session.id not in a._dirty, "a closed pooled connection is not an outage"
        assert await b._load(session.id) is None  # Redis lost the session's hash and lease
        await a.probe()  # finds its lease gone: the session is written in full
        seen = await b._load(session.id)
        assert seen is not None
        assert [m["content"] for m in seen.history] == ["one", "two", "three", "four"]

        # a write Redis did not take is written back when the session is let go
        other = await a.create()
        await redis_proc.stop()
        await a.append_history(other, user)
        assert a.degraded
        await a.release(other.id)  # Redis is away: kept until it is written back
        assert other.id in a._owned
        await redis_proc.start()
        await a.probe()
        assert not a.degraded and other.id not in a._owned
        seen = await b._load(other.id)
        assert seen is not None and [m["content"] for m in seen.history] == ["one", "two"]
        assert not a._dirty
