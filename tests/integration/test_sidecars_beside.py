"""Sidecars started beside the voice server from config share its LLM layer."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from tests.support.fake_openai import FakeOpenAI
from voice_server.config import load_settings
from voice_server.server.app import VoiceServer


async def test_host_sidecar_runs_beside_the_server_on_the_same_llm():
    """`sidecars: {host: ...}` starts the NDJSON host; its chat uses the server's LLM router."""
    async with FakeOpenAI(default_text="Hello from the shared model.") as fake:
        settings = load_settings(port=0, preload_models=False, llm_provider="openai_compat",
                                 llm_base_url=fake.base_url, llm_model="fake-model",
                                 sidecars={"host": {"port": 0}})
        async with VoiceServer(settings) as server:
            host, _, port = server.sidecars["host"]["tcp"].rpartition(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            info = json.loads(await asyncio.wait_for(reader.readline(), 10))
            assert info["type"] == "server_info" and info["payload"]["status"] == "ready"
            start = {"type": "chat_start", "request_id": "r1", "payload": {"prompt": "hi"}}
            writer.write(json.dumps(start).encode() + b"\n")
            await writer.drain()
            text = ""
            async with asyncio.timeout(10):
                while True:
                    msg = json.loads(await reader.readline())
                    if msg["type"] == "chat_chunk":
                        text += msg["payload"]["text"]
                    if msg["type"] == "chat_end":
                        break
            writer.close()
            assert text == "Hello from the shared model."
            assert fake.requests[-1]["messages"][-1]["content"] == "hi"


async def test_caller_runs_beside_the_server_on_the_same_llm():
    """`sidecars: {caller: ...}` starts the LLM caller; its `local` provider is the server's
    model, and the server's health lists its address."""
    async with FakeOpenAI(default_text="Hello from the shared model.") as fake:
        settings = load_settings(port=0, preload_models=False, llm_provider="openai_compat",
                                 llm_base_url=fake.base_url, llm_model="fake-model",
                                 sidecars={"caller": {"port": 0, "token": "beside"}})
        async with VoiceServer(settings) as server, aiohttp.ClientSession() as http:
            url = server.sidecars["caller"]["url"]
            async with http.get(f"http://127.0.0.1:{server.port}/health") as resp:
                assert (await resp.json())["sidecars"]["caller"] == {"url": url}
            async with http.post(f"{url}/mcp/chat", headers={"x-llm-caller-token": "beside"},
                                 json={"requestId": "b1", "callerTool": "t", "messages": [
                                     {"role": "user", "content": "hi"}]}) as resp:
                body = await resp.json()
            assert body["message"]["content"] == "Hello from the shared model.", body
            assert body["providerInfo"]["model"] == "fake-model"
