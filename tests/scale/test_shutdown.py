"""Graceful shutdown (issue 9): SIGTERM to a ``voice-server serve`` process mid-turn lets the
turn finish, persists the session, closes with 1001, and the client continues on instance B.
Also when the signal goes to the whole process group, model workers included, as systemd's
``systemctl stop`` sends it by default (KillMode=control-group)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
import websockets

from tests.conftest import scaled
from tests.support.fake_openai import Reply

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


async def start_serve(*args: str, log: Path | None = None,
                      ) -> tuple[asyncio.subprocess.Process, int]:
    with open(log or os.devnull, "ab") as stderr:  # noqa: ASYNC230 (a local file, once)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voice_server.cli", "serve", "--port", "0",
            "--preload-models", "false", "--log-level", "WARNING", *args, cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=stderr,
            start_new_session=True)  # its own process group, which a test may signal whole
    assert proc.stdout is not None
    async with asyncio.timeout(scaled(60)):
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError("voice-server serve exited before it was ready")
            if match := re.search(r"ws://127\.0\.0\.1:(\d+)/ws", line):
                return proc, int(match.group(1))


@pytest.mark.parametrize("to", ["process", "group"])
async def test_sigterm_mid_turn_then_continue_on_b(to, pair, redis_proc, scale_llm, connect,
                                                   make_speech, tmp_path):
    _, b = pair
    proc, port = await start_serve("--session-store", redis_proc.url,
                                   "--llm-provider", "openai_compat",
                                   "--llm-base-url", scale_llm.base_url,
                                   "--llm-model", "fake-model", "--shutdown-grace-s", "30",
                                   log=tmp_path / "stderr.log")
    try:
        scale_llm.add(Reply(text="The moon is far. It is about four hundred thousand "
                                 "kilometres away.", chunk_delay_s=0.15),
                      "It takes about three days to get there.")
        wav = make_speech("How far away is the moon?")
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
            ready = json.loads(await ws.recv())
            session_id = ready["id"]
            await ws.send(json.dumps({"type": "audio", "data": base64.b64encode(wav).decode()}))
            seen: list[str] = []
            async with asyncio.timeout(scaled(90)):
                while (msg := json.loads(await ws.recv()))["type"] != "llm-chunk":
                    seen.append(msg["type"])
                if to == "group":  # mid-answer
                    os.killpg(proc.pid, signal.SIGTERM)
                else:
                    proc.send_signal(signal.SIGTERM)
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    while True:
                        seen.append(json.loads(await ws.recv())["type"])
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert "llm" in seen and "tts-complete" in seen, seen  # the turn was allowed to finish
        async with asyncio.timeout(scaled(30)):
            assert await proc.wait() == 0
        # the workers are the server's to stop: none died of the signal and none was restarted
        assert "worker died" not in (tmp_path / "stderr.log").read_text()
        async with connect(b) as on_b:
            await on_b.send({"type": "reconnect", "sessionId": session_id})
            ack = await on_b.recv(timeout=15)
            assert ack["success"] is True and ack["sessionId"] == session_id
            await on_b.send({"type": "audio", "data": base64.b64encode(
                make_speech("How long does it take to get there?")).decode()})
            messages = await on_b.until("llm", timeout=60)
        assert messages[-1]["text"] == "It takes about three days to get there."
        sent = scale_llm.requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
        assert "moon" in sent[1]["content"].lower()
        assert sent[2]["content"].startswith("The moon is far.")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
