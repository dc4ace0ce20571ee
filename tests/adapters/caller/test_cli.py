"""``voice-server sidecar caller``: the command line, and the default ``local`` provider serving
chat with the embedded model (the one local-model test of this adapter)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support.netns import free_port
from voice_server.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_http_mode_needs_a_registry_or_token(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Without --client-registry or --token the HTTP sidecar refuses to start (exit 2)."""
    for name in ("LLM_CALLER_TOKEN", "LLM_CALLER_CLIENT_REGISTRY", "LLM_CALLER_PROVIDERS"):
        monkeypatch.delenv(name, raising=False)
    assert main(["sidecar", "caller", "--port", "0"]) == 2
    assert "needs --client-registry FILE or --token TOKEN" in capsys.readouterr().err


def test_bad_registry_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid registry file is a one-line configuration error."""
    bad = tmp_path / "reg.json"
    bad.write_text('{"clients": [{"toolId": "t"}]}')
    assert main(["sidecar", "caller", "--client-registry", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "client registry" in err and "Traceback" not in err



@pytest.mark.slow
async def test_cli_serves_local_chat_and_stops_on_sigterm() -> None:
    """The sidecar process answers chat with the embedded model, then exits 0 on SIGTERM."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_CALLER_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voice_server.cli", "sidecar", "caller", "--port", str(port),
        "--token", "cli-token", cwd=str(ROOT), env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert json.loads(line) == {"url": f"http://127.0.0.1:{port}"}, line
        async with aiohttp.ClientSession(headers={"x-llm-caller-token": "cli-token"}) as http:
            resp = await http.post(f"http://127.0.0.1:{port}/mcp/chat", json={
                "requestId": "cli-1", "callerTool": "t", "maxTokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello."}]})
            body = json.loads(await resp.text())
        assert resp.status == 200, body
        assert body["providerInfo"]["name"] == "local"
        assert body["providerInfo"]["routing"] == {"capability": "chat",
                                                   "strategy": "capability-default"}
        assert body["message"]["content"].strip()
        assert 0 < body["usage"]["outputTokens"] <= 8
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
