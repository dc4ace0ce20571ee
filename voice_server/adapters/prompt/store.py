"""Tool-configuration store: SQLite by default, PostgreSQL when a DSN is given.

Spec: specs/sidecar-prompt-service.md "Key Components" (``ToolDAO``: provider, model, base URL,
API key reference, defaults, settings). Both back ends run the same migrations (portable SQL,
``?`` placeholders rewritten to ``$n`` for PostgreSQL) and the same queries; driver errors are
logged and surface as ``StoreError`` with a generic message.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, field_validator

from ...config import data_dir_from_env
from ..kit import AsyncService, StrictModel
from .errors import StoreError, ToolNotFound

__all__ = [
    "MIGRATIONS",
    "PostgresToolStore",
    "SQLiteToolStore",
    "ToolConfig",
    "ToolStore",
    "open_store",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

SQLITE_FILE_NAME = "prompt-tools.sqlite3"

# (version, statements). Never edit a released entry: append a new one.
MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, [
        """CREATE TABLE prompt_tools (
            name TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            model TEXT,
            base_url TEXT,
            api_key_secret TEXT,
            temperature DOUBLE PRECISION,
            max_output_tokens INTEGER,
            settings TEXT NOT NULL DEFAULT '{}',
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL
        )""",
    ]),
]

_COLUMNS = ("name", "provider", "model", "base_url", "api_key_secret", "temperature",
            "max_output_tokens", "settings", "created_at", "updated_at")
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM prompt_tools"
_UPSERT = (
    f"INSERT INTO prompt_tools ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
    "ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in ("name", "created_at"))
)


class ToolConfig(StrictModel):
    """One tool: which LLM serves it and with which defaults."""

    name: str = Field(min_length=1, max_length=200)
    provider: str = Field(min_length=1, max_length=40)
    model: str | None = None
    base_url: str | None = None
    api_key_secret: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    max_output_tokens: int | None = Field(None, ge=1, lt=2**31)
    settings: dict[str, Any] = Field(default_factory=dict)
    created_at: int = 0
    updated_at: int = 0

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.strip() or any(ord(ch) < 32 for ch in value):
            raise ValueError("a tool name must be printable and not blank")
        return value.strip()

    @field_validator("model", "base_url", "api_key_secret")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None


def _row_to_config(row: Any) -> ToolConfig:
    values = dict(zip(_COLUMNS, tuple(row), strict=True))
    try:
        values["settings"] = json.loads(values["settings"] or "{}")
    except ValueError:
        values["settings"] = {}
    return ToolConfig.model_construct(**values)


class ToolStore(AsyncService):
    """The interface (and the shared SQL) of every back end: ``async with store: ...``.

    A back end connects in ``_connect`` (its connection or pool in ``_handle``) and runs the
    ``MIGRATIONS`` in ``_migrate``."""

    _errors: tuple[type[BaseException], ...] = ()
    _handle: Any = None  # the open connection (SQLite) or pool (PostgreSQL)

    async def start(self) -> None:
        await self.open()

    async def open(self) -> None:
        try:
            await self._connect()
            await self._migrate()
        except self._errors as exc:
            await self.aclose()
            raise self._fail("open", exc) from exc

    async def aclose(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            await handle.close()

    def _conn(self) -> Any:
        if self._handle is None:
            raise StoreError("the tool store is not open")
        return self._handle

    async def _migrate(self) -> None:
        """Run the ``MIGRATIONS`` not recorded yet, in a transaction no other migrator runs
        beside (``_migrating`` yields its ``execute(sql, *args)`` and ``fetch(sql)``)."""
        async with self._migrating() as (execute, fetch):
            await execute("CREATE TABLE IF NOT EXISTS prompt_schema_migrations "
                          "(version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)")
            done = {row[0] for row in await fetch("SELECT version FROM prompt_schema_migrations")}
            for version, statements in MIGRATIONS:
                if version not in done:
                    for statement in statements:
                        await execute(statement)
                    await execute("INSERT INTO prompt_schema_migrations VALUES (?, ?)",
                                  version, int(time.time()))

    # back-end primitives ---------------------------------------------------------------------
    async def _connect(self) -> None:
        raise NotImplementedError

    def _migrating(self) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
        raise NotImplementedError

    async def _fetch(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        raise NotImplementedError

    async def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        raise NotImplementedError

    # operations ------------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> StoreError:
        log.warning("tool store: %s failed: %s: %s", what, type(exc).__name__, exc)
        return StoreError("the tool store is unavailable")

    async def _guarded(self, what: str, call: Awaitable[_T]) -> _T:
        """``await call``; a driver's error is logged and becomes the generic ``StoreError``."""
        try:
            return await call
        except self._errors as exc:
            raise self._fail(what, exc) from exc

    async def get(self, name: str) -> ToolConfig:
        """The tool called ``name``; ``ToolNotFound`` when there is none."""
        rows = await self._guarded("get", self._fetch(_SELECT + " WHERE name = ?", (name,)))
        if not rows:
            raise ToolNotFound()
        return _row_to_config(rows[0])

    async def list(self) -> list[ToolConfig]:
        rows = await self._guarded("list", self._fetch(_SELECT + " ORDER BY name"))
        return [_row_to_config(row) for row in rows]

    async def put(self, config: ToolConfig) -> ToolConfig:
        """Insert or replace the tool (``created_at`` of an existing one is kept)."""
        now = int(time.time())
        stored = config.model_copy(update={"created_at": config.created_at or now,
                                           "updated_at": now})
        args = tuple(getattr(stored, c) for c in _COLUMNS)
        args = tuple(json.dumps(a, sort_keys=True) if isinstance(a, dict) else a for a in args)
        await self._guarded("put", self._execute(_UPSERT, args))
        return await self.get(stored.name)

    async def remove(self, name: str) -> bool:
        """Delete the tool; ``False`` when it did not exist."""
        sql = "DELETE FROM prompt_tools WHERE name = ?"
        return await self._guarded("remove", self._execute(sql, (name,))) > 0


class SQLiteToolStore(ToolStore):
    """The default store: one SQLite file (WAL mode) opened through ``aiosqlite``."""

    def __init__(self, path: str | Path) -> None:
        import sqlite3

        self.path = Path(path)
        self._errors = (sqlite3.Error, OSError, ValueError)

    async def _connect(self) -> None:
        import aiosqlite

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = await aiosqlite.connect(self.path)
        await self._handle.execute("PRAGMA busy_timeout = 5000")
        await self._handle.execute("PRAGMA journal_mode = WAL")

    @contextlib.asynccontextmanager
    async def _migrating(self) -> AsyncIterator[tuple[Any, Any]]:
        db = self._handle
        await db.execute("BEGIN IMMEDIATE")
        try:
            yield (lambda sql, *args: db.execute(sql, args)), db.execute_fetchall
            await db.commit()
        except BaseException:
            await db.rollback()
            raise

    async def _fetch(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        async with self._conn().execute(sql, args) as cur:
            return list(await cur.fetchall())

    async def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        db = self._conn()
        cur = await db.execute(sql, args)
        await db.commit()
        return cur.rowcount


def _dollar_params(sql: str) -> str:
    numbers = itertools.count(1)
    return re.sub(r"\?", lambda _: f"${next(numbers)}", sql)


class PostgresToolStore(ToolStore):
    """The same store on PostgreSQL through an ``asyncpg`` pool."""

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 4,
                 timeout_s: float = 10.0) -> None:
        import asyncpg

        self.dsn = dsn
        self._errors = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError,
                        ValueError)
        self._sizes = (min_size, max_size)
        self._timeout_s = timeout_s

    async def _connect(self) -> None:
        import asyncpg

        self._handle = await asyncpg.create_pool(
            self.dsn, min_size=self._sizes[0], max_size=self._sizes[1],
            timeout=self._timeout_s, command_timeout=self._timeout_s)

    @contextlib.asynccontextmanager
    async def _migrating(self) -> AsyncIterator[tuple[Any, Any]]:
        async with self._handle.acquire() as conn, conn.transaction():
            # one migrator at a time across processes
            await conn.execute("SELECT pg_advisory_xact_lock(8117460)")
            yield (lambda sql, *args: conn.execute(_dollar_params(sql), *args)), conn.fetch

    async def _fetch(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return list(await self._conn().fetch(_dollar_params(sql), *args))

    async def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> int:
        status = await self._conn().execute(_dollar_params(sql), *args)
        # asyncpg returns the command tag, e.g. "DELETE 1" or "INSERT 0 1"
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0


def open_store(db: str | None = None, *, data_dir: str | Path | None = None) -> ToolStore:
    """A store for ``db``: a ``postgres://`` DSN, a SQLite path (``sqlite:///`` optional), or
    ``None`` for ``prompt-tools.sqlite3`` under the data directory. Enter it with ``async with``."""
    if db and db.startswith(("postgres://", "postgresql://")):
        return PostgresToolStore(db)
    if db:
        return SQLiteToolStore(db.removeprefix("sqlite://") if db.startswith("sqlite:///")
                               else db)
    return SQLiteToolStore(Path(data_dir or data_dir_from_env()) / SQLITE_FILE_NAME)
