"""Sessions shared between instances through Redis (docs/deploy.md, "How the pieces fit").

Layout (``prefix`` defaults to ``vs:``), every key with the session TTL, refreshed on each write:

* ``vs:s:<id>`` hash: ``state`` and ``meta`` (JSON), ``created_at``;
* ``vs:h:<id>`` list: one JSON history message per item (a turn is an ``RPUSH``, never a rewrite);
* ``vs:lease:<id>`` string: the id of the instance that owns the session, with a short expiry
  renewed while it is connected. Only the owner runs the session's turns and writes it;
* ``vs:alive:<instance>`` string: the instance's heartbeat, expiring ``heartbeat_s`` (2 s) after
  its last renewal (every half second).

A reconnect on another instance *claims* the session: if a live instance holds the lease, it is
asked (pub/sub channel ``vs:release:<instance>``) to let go; the old connection is cut, persisted
and its lease released, then the new owner loads the session. A lease whose owner has no
heartbeat (killed, frozen, cut off from Redis) is taken over at once, so a conversation resumes
on another instance about 2 s after its owner died, not when the lease runs out.

When Redis is unreachable the store is *degraded*: new sessions live in memory on this instance,
owned sessions keep working from their local copy, and once Redis answers again both are written
back in full (the new ones become owned, leased sessions like any other). The resume of a session
held only in Redis waits for Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ..metrics import session_tag
from .sessions import InMemorySessionStore, Session, new_session_id, ttl_of

__all__ = ["RedisSessionStore"]

log = logging.getLogger(__name__)

# Delete / renew a lease only if this instance still holds it.
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) " \
           "else return 0 end"
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then " \
         "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
# Take a lease over from a given (dead) holder, only if it still holds it.
_TAKE_OVER = "if redis.call('get', KEYS[1]) == ARGV[1] then " \
             "return redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3]) else return 0 end"


class RedisSessionStore:
    """``SessionStore`` on Redis with per-session leases and an in-memory fallback."""

    def __init__(self, url: str, *, ttl_s: float, empty_ttl_s: float | None = None,
                 lease_s: float = 15.0,
                 instance_id: str | None = None, prefix: str = "vs:",
                 probe_every_s: float = 1.0, claim_wait_s: float = 8.0,
                 heartbeat_s: float = 2.0, max_connections: int = 32) -> None:
        self.ttl_s = ttl_s
        self.empty_ttl_s = ttl_s if empty_ttl_s is None else min(empty_ttl_s, ttl_s)
        self.lease_s = lease_s
        self.instance_id = instance_id or secrets.token_hex(6)
        self.prefix = prefix
        self.probe_every_s = probe_every_s
        self.claim_wait_s = claim_wait_s
        self.heartbeat_s = heartbeat_s
        self.url = url
        self.degraded = False
        # Called with a session id when another instance claims a session this one owns.
        self.on_release: Callable[[str], Awaitable[None]] | None = None
        # a bounded pool: a burst of sessions waits up to 2 s for a connection instead of
        # opening thousands of them against Redis. A command that finds its pooled connection
        # closed (Redis restarted) is sent once more on a new one; a timeout is not retried.
        pool = BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=2.0, decode_responses=True,
            client_name=f"voice_server-{self.instance_id}",  # CLIENT LIST names us
            socket_timeout=2.0, socket_connect_timeout=2.0,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            health_check_interval=0)
        self._redis = Redis.from_pool(pool)  # closing the client closes the pool
        self._release_lua = self._redis.register_script(_RELEASE)
        self._renew_lua = self._redis.register_script(_RENEW)
        self._take_over_lua = self._redis.register_script(_TAKE_OVER)
        self._memory = InMemorySessionStore(ttl_s=ttl_s, empty_ttl_s=empty_ttl_s)
        self._owned: dict[str, Session] = {}
        self._dirty: set[str] = set()  # owned sessions written while Redis was down
        self._unheld: set[str] = set()  # written back after an outage, nobody connected
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    # ---- keys and codec -----------------------------------------------------------------------
    def _k(self, kind: str, session_id: str) -> str:
        return f"{self.prefix}{kind}:{session_id}"

    def _alive_key(self, instance_id: str) -> str:
        return f"{self.prefix}alive:{instance_id}"

    @property
    def _channel(self) -> str:
        return f"{self.prefix}release:{self.instance_id}"

    def _ttl_ms(self, session: Session) -> int:
        return int(ttl_of(session, self.ttl_s, self.empty_ttl_s) * 1000)

    def _expire(self, pipe: Any, session: Session) -> None:
        """(Re)start the time to live of both of a session's keys, in ``pipe``."""
        ttl_ms = self._ttl_ms(session)
        pipe.pexpire(self._k("s", session.id), ttl_ms)
        pipe.pexpire(self._k("h", session.id), ttl_ms)

    # ---- lifecycle ----------------------------------------------------------------------------
    async def __aenter__(self) -> RedisSessionStore:
        await self._memory.__aenter__()
        try:
            await self._beat()
        except RedisError as exc:
            self._mark_down(exc)
        self._tasks = [
            asyncio.create_task(self._probe_loop(), name=f"redis-probe-{self.instance_id}"),
            asyncio.create_task(self._listen_loop(), name=f"redis-listen-{self.instance_id}"),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        # The listener stops on the event: cancelling redis-py's pub/sub mid-read can leave its
        # lock held and hang the close. Cancellation is only the fallback.
        self._stopping.set()
        if self._tasks:
            self._tasks[0].cancel()  # the probe loop
            _, pending = await asyncio.wait(self._tasks, timeout=3.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        self._tasks = []
        for session_id in list(self._owned):
            await self.release(session_id)
        if self._dirty:
            log.warning("%d session(s) not written back: redis unreachable at shutdown",
                        len(self._dirty))
        with contextlib.suppress(RedisError):  # a clean stop: no one waits for our heartbeat
            await self._redis.delete(self._alive_key(self.instance_id))
        await self._memory.aclose()
        await self._redis.aclose()

    def _mark_down(self, exc: BaseException) -> None:
        if not self.degraded:
            log.warning("redis session store unreachable (%s): degraded, new sessions in memory",
                        exc)
        self.degraded = True

    # ---- SessionStore -------------------------------------------------------------------------
    async def create(self) -> Session:
        if self.degraded:
            return await self._memory.create()
        session = Session(id=new_session_id())
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._k("s", session.id), mapping=self._fields(session))
                pipe.pexpire(self._k("s", session.id), self._ttl_ms(session))
                pipe.set(self._k("lease", session.id), self.instance_id,
                         px=int(self.lease_s * 1000))
                await pipe.execute()
        except RedisError as exc:
            self._mark_down(exc)
            return await self._memory.create()
        self._owned[session.id] = session
        return session

    async def get(self, session_id: str) -> Session | None:
        """The session as this instance knows it (its own copy when it owns it)."""
        if session_id in self._owned:
            return self._owned[session_id]
        local = await self._memory.get(session_id)
        if local is not None:
            return local
        return await self._load(session_id)

    async def claim(self, session_id: str) -> Session | None:
        """Own the session (asking its current owner to let go) and return it fresh."""
        if session_id in self._owned:
            self._unheld.discard(session_id)  # connected again before its write-back
            return self._owned[session_id]
        local = await self._memory.get(session_id)
        if local is not None:
            return local
        try:
            if not await self._acquire(session_id):
                log.warning("session %s: its owner did not let go in %.1f s",
                            session_tag(session_id), self.claim_wait_s)
                return None
        except RedisError as exc:
            self._mark_down(exc)
            return None
        session = await self._load(session_id)
        if session is None:
            await self.release(session_id)
            return None
        self._owned[session_id] = session
        return session

    async def release(self, session_id: str) -> None:
        """Give up ownership (the session stays in Redis for its TTL). A session with writes
        Redis has not seen is written back first; while Redis is away it is kept, and let go
        once the probe has written it back."""
        if session_id in self._dirty and session_id in self._owned:
            try:
                await self._write_back(session_id)
            except RedisError as exc:
                self._mark_down(exc)
                self._unheld.add(session_id)
                return
        self._owned.pop(session_id, None)
        self._dirty.discard(session_id)
        self._unheld.discard(session_id)
        await self._memory.release(session_id)  # one made during an outage: its TTL starts
        with contextlib.suppress(RedisError):
            await self._release_lua(keys=[self._k("lease", session_id)],
                                    args=[self.instance_id])

    async def append_history(self, session: Session, messages: list[dict[str, Any]]) -> None:
        if session.id not in self._owned:
            await self._memory.append_history(session, messages)
            return
        session.history.extend(messages)
        if not messages:
            return
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.rpush(self._k("h", session.id), *[json.dumps(m) for m in messages])
                self._expire(pipe, session)
                await pipe.execute()
        except RedisError as exc:
            self._mark_down(exc)
            self._dirty.add(session.id)

    async def save(self, session: Session) -> None:
        if session.id not in self._owned:
            await self._memory.save(session)
            return
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._k("s", session.id), mapping=self._fields(session))
                self._expire(pipe, session)
                await pipe.execute()
        except RedisError as exc:
            self._mark_down(exc)
            self._dirty.add(session.id)

    async def delete(self, session_id: str) -> None:
        await self._memory.delete(session_id)
        owned = self._owned.pop(session_id, None)
        self._dirty.discard(session_id)
        if owned is None:
            return
        with contextlib.suppress(RedisError):
            await self._redis.delete(self._k("s", session_id), self._k("h", session_id))
            await self._release_lua(keys=[self._k("lease", session_id)],
                                    args=[self.instance_id])

    async def count(self) -> int:
        """Sessions held by this instance (owned from Redis plus in-memory fallbacks)."""
        return len(self._owned) + await self._memory.count()

    def health(self) -> dict[str, Any]:
        return {"status": "degraded" if self.degraded else "ok", "kind": "redis",
                "instance": self.instance_id, "owned": len(self._owned),
                "fallback": len(self._memory._sessions)}

    # ---- internals ----------------------------------------------------------------------------
    @staticmethod
    def _fields(session: Session) -> dict[str, str]:
        return {"state": json.dumps(session.state), "meta": json.dumps(session.meta),
                "created_at": repr(session.created_at)}

    async def _load(self, session_id: str) -> Session | None:
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hgetall(self._k("s", session_id))
                pipe.lrange(self._k("h", session_id), 0, -1)
                fields, items = await pipe.execute()
        except RedisError as exc:
            self._mark_down(exc)
            return None
        if not fields:
            return None
        try:
            return Session(id=session_id, history=[json.loads(i) for i in items],
                           state=json.loads(fields.get("state", "{}")),
                           meta=json.loads(fields.get("meta", "{}")),
                           created_at=float(fields.get("created_at", time.time())))
        except ValueError:
            log.warning("session %s in redis is corrupt; ignoring it", session_tag(session_id))
            return None

    async def _acquire(self, session_id: str) -> bool:
        key = self._k("lease", session_id)
        lease_ms = int(self.lease_s * 1000)
        deadline = time.monotonic() + self.claim_wait_s
        asked: str | None = None
        delay = 0.02
        while True:
            if await self._redis.set(key, self.instance_id, nx=True, px=lease_ms):
                return True
            holder = await self._redis.get(key)
            if holder == self.instance_id:
                return True
            if holder is not None and not await self._redis.exists(self._alive_key(holder)):
                # its owner is dead: take the lease over now rather than when it runs out
                if await self._take_over_lua(keys=[key], args=[holder, self.instance_id,
                                                               lease_ms]):
                    log.info("session %s taken over from instance %s, which has no heartbeat",
                             session_tag(session_id), holder)
                    return True
                continue
            if holder is not None and holder != asked:
                await self._redis.publish(f"{self.prefix}release:{holder}", session_id)
                asked = holder
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(delay)  # retry backoff while the old owner lets go
            delay = min(delay * 2, 0.25)

    async def _beat(self) -> None:
        """Say this instance is alive (also the probe of Redis)."""
        await self._redis.set(self._alive_key(self.instance_id), "1",
                              px=int(self.heartbeat_s * 1000))

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(min(self.probe_every_s, self.heartbeat_s / 4, self.lease_s / 3))
            await self.probe()

    async def probe(self) -> None:
        """Beat; renew owned leases; write back local copies once Redis returns (what the
        store does every ``probe_every_s``; never raises)."""
        try:
            await self._beat()
        except RedisError as exc:
            self._mark_down(exc)
            return
        if self.degraded:
            log.info("redis session store reachable again")
            self.degraded = False
            self._adopt_fallbacks()
        try:
            await self._renew_leases()
            await self._flush_dirty()
        except RedisError as exc:
            self._mark_down(exc)

    async def _renew_leases(self) -> None:
        lease_ms = int(self.lease_s * 1000)
        for session_id in list(self._owned):
            key = self._k("lease", session_id)
            if await self._renew_lua(keys=[key], args=[self.instance_id, lease_ms]):
                continue
            # expired while Redis was away, or Redis restarted empty: take it back unless
            # someone else did, and write the session in full (Redis may have lost it)
            if await self._redis.set(key, self.instance_id, nx=True, px=lease_ms):
                self._dirty.add(session_id)
                continue
            log.warning("session %s: lease lost to another instance", session_tag(session_id))
            await self._let_go(session_id)

    def _adopt_fallbacks(self) -> None:
        """Sessions created in memory during the outage become this instance's, to be written
        back in full by ``_flush_dirty`` (and leased by ``_renew_leases``)."""
        for session, held in self._memory.drain():
            self._owned[session.id] = session
            self._dirty.add(session.id)
            if not held:  # its connection is gone: written back, then let go
                self._unheld.add(session.id)

    async def _flush_dirty(self) -> None:
        for session_id in list(self._dirty):
            if session_id not in self._owned:
                self._dirty.discard(session_id)
                continue
            await self._write_back(session_id)
            if session_id in self._unheld:
                await self.release(session_id)

    async def _write_back(self, session_id: str) -> None:
        """Write an owned session in full (raises ``RedisError``: it stays dirty)."""
        session = self._owned[session_id]
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(self._k("h", session_id))
            if session.history:
                pipe.rpush(self._k("h", session_id), *[json.dumps(m) for m in session.history])
            pipe.hset(self._k("s", session_id), mapping=self._fields(session))
            self._expire(pipe, session)
            await pipe.execute()
        self._dirty.discard(session_id)  # only once written: an outage retries it

    async def _let_go(self, session_id: str) -> None:
        if session_id in self._owned and self.on_release is not None:
            await self.on_release(session_id)
        await self.release(session_id)

    async def _listen_loop(self) -> None:
        """Serve release requests from other instances (reconnects that landed there)."""
        while not self._stopping.is_set():
            try:
                async with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self._channel)
                    while not self._stopping.is_set():
                        msg = await pubsub.get_message(timeout=0.5)
                        if msg is not None and msg.get("type") == "message":
                            session_id = str(msg["data"])
                            log.info("session %s claimed by another instance",
                                     session_tag(session_id))
                            await self._let_go(session_id)
            except RedisError as exc:
                self._mark_down(exc)
                with contextlib.suppress(TimeoutError):  # resubscribe after an outage
                    await asyncio.wait_for(self._stopping.wait(), self.probe_every_s)
