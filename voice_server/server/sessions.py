"""Sessions outlive connections for a TTL, behind the ``SessionStore`` interface.

A session id is an unguessable 128-bit random token; a reconnect with an unknown or expired id
never adopts the client's id (spec: "Session Reconnection").
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["InMemorySessionStore", "Session", "SessionStore", "new_session_id"]


def new_session_id() -> str:
    return secrets.token_urlsafe(16)  # 128 bits


def ttl_of(session: Session, ttl_s: float, empty_ttl_s: float) -> float:
    """How long a session is kept after its last use: a session in which nothing was said yet
    has nothing to resume, and goes after ``empty_ttl_s`` (silent sockets must not pile up
    sessions for half an hour)."""
    return ttl_s if session.history or session.state else empty_ttl_s


@dataclass
class Session:
    id: str
    history: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)  # playbook stage, data, counters
    meta: dict[str, Any] = field(default_factory=dict)  # playbook id, principal, ...
    created_at: float = field(default_factory=time.time)
    touched_at: float = field(default_factory=time.monotonic)


class SessionStore(Protocol):
    ttl_s: float

    async def create(self) -> Session: ...

    async def get(self, session_id: str) -> Session | None:
        """The live session, or None if unknown or expired."""
        ...

    async def append_history(self, session: Session, messages: list[dict[str, Any]]) -> None:
        """Add messages at the end of a session's history (small, incremental writes)."""
        ...

    async def save(self, session: Session) -> None:
        """Persist state/meta changes and refresh the TTL."""
        ...

    async def claim(self, session_id: str) -> Session | None:
        """Like ``get``, and this instance becomes the session's only runner (a lease in a
        shared store)."""
        ...

    async def release(self, session_id: str) -> None:
        """This instance no longer runs the session (no connection holds it)."""
        ...

    async def delete(self, session_id: str) -> None: ...

    async def count(self) -> int: ...

    def health(self) -> dict[str, Any]:
        """``status`` (``ok`` or ``degraded``), ``kind`` and what else the store can tell."""
        ...

    async def aclose(self) -> None: ...


class InMemorySessionStore:
    """Sessions in a dict; expired ones are removed on access and by a periodic sweep."""

    def __init__(self, *, ttl_s: float, empty_ttl_s: float | None = None,
                 sweep_every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.empty_ttl_s = ttl_s if empty_ttl_s is None else min(empty_ttl_s, ttl_s)
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._held: set[str] = set()  # created or claimed, not yet released
        self._sweep_every_s = sweep_every_s
        self._sweeper: asyncio.Task[None] | None = None

    async def __aenter__(self) -> InMemorySessionStore:
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="session-sweeper")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _expired(self, session: Session) -> bool:
        if session.id in self._held:  # a connection uses it: it lasts as long as that does
            return False
        return self._clock() - session.touched_at > ttl_of(session, self.ttl_s, self.empty_ttl_s)

    async def create(self) -> Session:
        session = Session(id=new_session_id(), touched_at=self._clock())
        self._sessions[session.id] = session
        self._held.add(session.id)
        return session

    async def get(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if self._expired(session):
            del self._sessions[session_id]
            return None
        session.touched_at = self._clock()
        return session

    async def append_history(self, session: Session, messages: list[dict[str, Any]]) -> None:
        session.history.extend(messages)
        session.touched_at = self._clock()

    async def save(self, session: Session) -> None:
        session.touched_at = self._clock()
        self._sessions[session.id] = session

    async def claim(self, session_id: str) -> Session | None:
        session = await self.get(session_id)
        if session is not None:
            self._held.add(session_id)
        return session

    async def release(self, session_id: str) -> None:
        """One process: nothing to hand over; its time to live starts now."""
        self._held.discard(session_id)
        if (session := self._sessions.get(session_id)) is not None:
            session.touched_at = self._clock()

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "kind": "memory", "count": len(self._sessions)}

    async def delete(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        self._held.discard(session_id)

    async def count(self) -> int:
        return len(self._sessions)

    def drain(self) -> list[tuple[Session, bool]]:
        """Hand every live session over (to a store that is back), each with whether a
        connection holds it; this store is empty afterwards."""
        self.sweep()
        out = [(session, sid in self._held) for sid, session in self._sessions.items()]
        self._sessions.clear()
        self._held.clear()
        return out

    def sweep(self) -> int:
        expired = [sid for sid, s in self._sessions.items() if self._expired(s)]
        for sid in expired:
            del self._sessions[sid]
        return len(expired)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_every_s)
            self.sweep()

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
