"""The ``local`` provider: the embedded SmolLM2 model behind the Connect endpoint (one test)."""

from __future__ import annotations

import aiohttp
import pytest

from voice_server.adapters.prompt import PromptSidecar, ToolConfig, open_service


@pytest.mark.slow
async def test_local_tool_answers_with_real_token_counts(tmp_path):
    """A local tool answers through the embedded model with its own token counts."""
    async with open_service(db=str(tmp_path / "t.sqlite3")) as service:
        await service.store.put(ToolConfig(name="local", provider="local",
                                           max_output_tokens=8, temperature=0.1))
        async with PromptSidecar(service, port=0, grpc_port=None) as sidecar, \
                aiohttp.ClientSession(f"http://127.0.0.1:{sidecar.port}") as http, \
                http.post("/prompt.v1.PromptService/Run",
                          json={"tool_name": "local", "input": "Say hello."}) as resp:
            assert resp.status == 200, await resp.text()
            body = await resp.json()
    assert body["model"].startswith("SmolLM2")
    assert body["output"][0]["type"] == "output_text" and body["output"][0]["text"].strip()
    usage = body["usage"]
    assert usage["input_tokens"] > 3 and 0 < usage["output_tokens"] <= 8
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
