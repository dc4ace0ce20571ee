"""The sidecar kit: the LLM flags, connection tasks and their shutdown."""

from __future__ import annotations

import argparse
import asyncio

from voice_server.adapters.kit import (
    LLM_FLAGS,
    ConnectionTasks,
    add_llm_flags,
    close_stream,
    settings_from_args,
    stop_servers,
)


def test_llm_flags_override_only_what_is_given(monkeypatch):
    """A sidecar takes the LLM flags; one left out keeps the env's value."""
    monkeypatch.setenv("VOICE_SERVER_LLM_MODEL", "from-env")
    monkeypatch.delenv("VOICE_SERVER_CONFIG", raising=False)
    parser = argparse.ArgumentParser()
    add_llm_flags(parser)
    flags = {a.dest for a in parser._actions} - {"help"}
    assert flags == {"config", *LLM_FLAGS}
    settings = settings_from_args(parser.parse_args(["--llm-timeout-s", "7.5"]))
    assert (settings.llm_timeout_s, settings.llm_model) == (7.5, "from-env")


async def test_connection_tasks_are_named_counted_and_cancelled():
    """Each peer runs in a named task; stop_servers cancels them and stops listening."""
    tasks = ConnectionTasks("test")
    entered = asyncio.Event()
    seen: list[str] = []

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def connection() -> None:
            seen.append(asyncio.current_task().get_name())
            entered.set()
            await asyncio.sleep(3600)

        await tasks.serve(connection(), writer)

    server = await asyncio.start_server(peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.wait_for(entered.wait(), 5)
    assert (seen, len(tasks)) == (["test-conn-1"], 1)
    running = next(iter(tasks.tasks))
    await stop_servers([server], tasks)
    assert running.cancelled() and len(tasks) == 0 and not server.is_serving()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the peer's stream was closed
    await close_stream(writer)
    await close_stream(writer)  # closing twice is harmless
