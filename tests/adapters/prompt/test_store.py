"""Tool store: the same behaviour on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator

import asyncpg
import pytest

from voice_server.adapters.prompt.errors import StoreError, ToolNotFound
from voice_server.adapters.prompt.store import (
    MIGRATIONS,
    PostgresToolStore,
    SQLiteToolStore,
    ToolConfig,
    ToolStore,
    open_store,
)


@pytest.fixture(params=["sqlite", "postgres"])
async def any_store(request, tmp_path) -> AsyncIterator[ToolStore]:
    if request.param == "sqlite":
        opened: ToolStore = SQLiteToolStore(tmp_path / "t.sqlite3")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        conn = await asyncpg.connect(dsn)
        try:  # a clean database for each test
            await conn.execute("DROP TABLE IF EXISTS prompt_tools, prompt_schema_migrations")
        finally:
            await conn.close()
        opened = PostgresToolStore(dsn)
    async with opened:
        yield opened


def _tool(name: str = "t1", **kw) -> ToolConfig:
    values = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1",
              "api_key_secret": "k", "temperature": 0.25, "max_output_tokens": 64,
              "settings": {"top_p": 0.9, "system_prompt": "Be brief. «ü»"}}
    return ToolConfig(name=name, **{**values, **kw})


async def test_put_get_roundtrip(any_store):
    """Every field survives a round trip; timestamps are set."""
    stored = await any_store.put(_tool())
    got = await any_store.get("t1")
    assert got == stored
    assert got.model_dump(exclude={"created_at", "updated_at"}) == \
        _tool().model_dump(exclude={"created_at", "updated_at"})
    assert got.created_at > 0 and got.updated_at >= got.created_at


async def test_get_unknown_is_tool_not_found(any_store):
    """An unknown name is ToolNotFound (the PG path does not leak a no-rows error)."""
    with pytest.raises(ToolNotFound, match="^tool not found$"):
        await any_store.get("nope")


async def test_upsert_keeps_created_at(any_store):
    """Putting an existing name replaces its fields and keeps created_at."""
    first = await any_store.put(_tool(model="a"))
    second = await any_store.put(_tool(model="b", created_at=first.created_at,
                                       temperature=None, settings={}))
    assert (second.model, second.temperature, second.settings) == ("b", None, {})
    assert second.created_at == first.created_at
    assert [t.name for t in await any_store.list()] == ["t1"]


async def test_list_sorted_and_remove(any_store):
    """list() is sorted by name; remove() reports whether the tool existed."""
    for name in ("b", "a", "c"):
        await any_store.put(_tool(name, provider="local", model=None))
    assert [t.name for t in await any_store.list()] == ["a", "b", "c"]
    assert await any_store.remove("b") is True
    assert await any_store.remove("b") is False
    assert [t.name for t in await any_store.list()] == ["a", "c"]


async def test_migrations_recorded_once(any_store):
    """Reopening runs no migration twice; the version table lists each one once."""
    rows = await any_store._fetch("SELECT version FROM prompt_schema_migrations")
    assert sorted(r[0] for r in rows) == [v for v, _ in MIGRATIONS]
    await any_store._migrate()
    rows = await any_store._fetch("SELECT version FROM prompt_schema_migrations")
    assert len(rows) == len(MIGRATIONS)


async def test_postgres_concurrent_openers(pg_dsn):
    """Two stores opening one fresh database migrate it once (advisory lock)."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("DROP TABLE IF EXISTS prompt_tools, prompt_schema_migrations")
    finally:
        await conn.close()
    stores = [PostgresToolStore(pg_dsn), PostgresToolStore(pg_dsn)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        await stores[0].put(_tool())
        assert (await stores[1].get("t1")).model == "m"
        rows = await stores[1]._fetch("SELECT version FROM prompt_schema_migrations")
        assert len(rows) == len(MIGRATIONS)
    finally:
        for s in stores:
            await s.aclose()


async def test_sqlite_file_persists_and_settings_are_json(tmp_path):
    """The SQLite file keeps tools across opens; settings are stored as JSON text."""
    path = tmp_path / "sub" / "tools.sqlite3"
    async with SQLiteToolStore(path) as s:
        await s.put(_tool())
    async with SQLiteToolStore(path) as s:
        assert (await s.get("t1")).settings["top_p"] == 0.9
    with sqlite3.connect(path) as raw:
        (text,) = raw.execute("SELECT settings FROM prompt_tools").fetchone()
    assert json.loads(text) == {"system_prompt": "Be brief. «ü»", "top_p": 0.9}


async def test_open_store_picks_backend(tmp_path, monkeypatch):
    """A postgres:// DSN gives PostgreSQL; a path or nothing gives SQLite in the data dir."""
    assert isinstance(open_store("postgresql://u@127.0.0.1:1/db"), PostgresToolStore)
    assert open_store(f"sqlite://{tmp_path}/x.db").path == tmp_path / "x.db"
    monkeypatch.setenv("VOICE_SERVER_DATA_DIR", str(tmp_path / "data"))
    default = open_store(None)
    assert default.path == tmp_path / "data" / "prompt-tools.sqlite3"


async def test_unreachable_postgres_is_a_generic_store_error():
    """A server that is not there gives StoreError without the driver's text."""
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresToolStore(f"postgresql://postgres@127.0.0.1:{port}/postgres", timeout_s=2)
    with pytest.raises(StoreError) as info:
        await store.open()
    assert str(info.value) == "the tool store is unavailable"


async def test_sqlite_unopenable_path_is_a_store_error(tmp_path):
    """A directory in place of the file gives StoreError, not a sqlite3 traceback."""
    (tmp_path / "dir.sqlite3").mkdir()
    with pytest.raises(StoreError, match="^the tool store is unavailable$"):
        await SQLiteToolStore(tmp_path / "dir.sqlite3").open()


def test_tool_config_validation():
    """Blank names, out-of-range temperatures and token limits are rejected."""
    for bad in ({"name": " "}, {"temperature": 3}, {"max_output_tokens": 0},
                {"name": "a\nb"}):
        with pytest.raises(ValueError):
            ToolConfig(**{"name": "n", "provider": "openai", **bad})
    assert ToolConfig(name="n", provider="openai", model=" ").model is None
