"""The whole path with the PostgreSQL store: CLI writes tools, the sidecar serves them."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import asyncpg

from tests.support.fake_openai import FakeOpenAI, Reply
from voice_server.adapters.prompt import PromptSidecar, open_service
from voice_server.cli import main


async def test_cli_and_sidecar_on_postgres(pg_dsn, capsys):
    """Tools added with `--db DSN` are served; an unknown tool is not_found, not a DB error."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("DROP TABLE IF EXISTS prompt_tools, prompt_schema_migrations")
    finally:
        await conn.close()
    async with FakeOpenAI(model="m") as fake:
        code = await asyncio.to_thread(main, [
            "prompt", "tools", "add", "pg-echo", "--provider", "openai", "--model", "m",
            "--base-url", fake.base_url, "--max-output-tokens", "12", "--db", pg_dsn])
        assert (code, capsys.readouterr().out) == (0, "tool pg-echo saved\n")
        code = await asyncio.to_thread(main, ["prompt", "tools", "list", "--json",
                                              "--db", pg_dsn])
        assert [t["name"] for t in json.loads(capsys.readouterr().out)] == ["pg-echo"]

        fake.add(Reply(text="from postgres", prompt_tokens=2, completion_tokens=2))
        async with open_service(db=pg_dsn) as service, \
                PromptSidecar(service, port=0, grpc_port=None) as sidecar, \
                aiohttp.ClientSession(f"http://127.0.0.1:{sidecar.port}") as http:
            async with http.post("/prompt.v1.PromptService/Run",
                                 json={"tool_name": "pg-echo", "input": "x"}) as resp:
                assert resp.status == 200
                body = await resp.json()
            assert (body["output"][0]["text"], body["usage"]["total_tokens"]) == (
                "from postgres", 4)
            assert fake.requests[-1]["max_tokens"] == 12
            async with http.post("/prompt.v1.PromptService/Run",
                                 json={"tool_name": "absent", "input": "x"}) as resp:
                assert (resp.status, await resp.json()) == (
                    404, {"code": "not_found", "message": "tool not found"})
