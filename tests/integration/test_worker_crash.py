"""A crash in native model code costs one turn, never the server (issue 17): SIGKILL of the
STT, LLM or TTS worker while it works on a turn ends that turn with the stage's error code,
the connection and session stay open, /health says degraded while the worker restarts, the
restart is counted, and the next spoken turn on the same connection is answered."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request

import pytest
import pytest_asyncio

from tests.conftest import scaled
from tests.integration.test_ws_turn import audio_message, check_turn
from voice_server.config import DEFAULT_APOLOGY, load_settings
from voice_server.pipeline.tts import SaidBefore
from voice_server.server.app import VoiceServer
from voice_server.workers import RestartPolicy

pytestmark = pytest.mark.slow

CODES = {"stt": "STT_ERROR", "llm": "LLM_ERROR", "tts": "TTS_ERROR"}


@pytest_asyncio.fixture(scope="module")
async def server():
    """A server of its own: its workers get killed."""
    settings = load_settings(port=0, llm_max_tokens=40, llm_temperature=0.0)
    async with VoiceServer(settings) as srv:
        yield srv


def worker_of(server: VoiceServer, stage: str):
    return {"stt": server.stt.worker, "tts": server.tts.worker,
            "llm": server.router.providers["local"].worker}[stage]


def http_get(server: VoiceServer, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as resp:
        return resp.read().decode()


async def until(predicate, timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(scaled(timeout_s)):
        while not predicate():  # noqa: ASYNC110 - polls state no event announces
            await asyncio.sleep(0.002)


@pytest.mark.parametrize("stage", ["stt", "llm", "tts"])
async def test_a_worker_killed_mid_turn_costs_that_turn_only(server, connect, make_speech, stage,
                                                             monkeypatch):
    worker = worker_of(server, stage)
    restarts, old_pid = worker.restarts, worker.pid
    # The restart waits 3 s here (0.1 s by default), so that /health is read while it is
    # pending: measured, the worker was back 0.7-3.7 s after the kill and the error reached
    # the client 0.01-1.25 s after it (the LLM's: 0.55 s, back at 0.69 s). The tts case
    # failed once beside another test file (1 run in 7; its output was not kept).
    monkeypatch.setattr(worker, "policy", RestartPolicy(first_delay_s=3.0))
    # the answer is the one the other cases' next turns spoke: its audio would be played as
    # kept, and the voice's worker never asked (pipeline/tts.py SaidBefore)
    monkeypatch.setattr(server.tts, "said_before", SaidBefore(budget=0))
    # "capital of France" in espeak-ng's voice is heard "capital and friends" on some CPUs
    # (CTranslate2's kernels differ); "capital city of France" is heard right on every one tried
    wav = make_speech("What is the capital city of France?")
    async with connect(server) as client:
        await client.send(audio_message(wav))
        await until(lambda: worker.in_flight > 0)  # the stage is working on this turn
        os.kill(old_pid, signal.SIGKILL)
        killed = time.monotonic()
        failed = await client.until("error")
        assert failed[-1]["code"] == CODES[stage], failed[-1]
        assert "died (killed by SIGKILL)" in failed[-1]["message"]
        health = json.loads(await asyncio.to_thread(http_get, server, "/health"))
        assert health["status"] == "degraded"
        model = health["models"]["llm"]["local"] if stage == "llm" else health["models"][stage]
        assert model["status"] in ("restarting", "starting")
        if stage == "llm" and not any(m["type"] == "llm-chunk" for m in failed):
            # the model died before its first word: the agent says so (issue 20, item 12);
            # its tts-complete comes once the client has played it, the worker back by then
            said = await client.until("tts-complete", timeout=60)
            assert [m["text"] for m in said if m["type"] == "llm"] == [DEFAULT_APOLOGY]

        await client.send(audio_message(wav))  # the same connection, the next turn
        turn = check_turn(await client.until("tts-complete", timeout=120))
        recovered_s = time.monotonic() - killed
        assert "france" in turn["transcript"].lower()
        assert turn["text"].strip() and len(turn["pcm"]) > 22050 // 2
    assert worker.restarts == restarts + 1 and worker.pid != old_pid
    assert worker.health()["status"] == "ok"
    metrics = await asyncio.to_thread(http_get, server, "/metrics")
    assert f'voice_worker_restarts_total{{stage="{stage}"}} 1.0' in metrics
    health = json.loads(await asyncio.to_thread(http_get, server, "/health"))
    assert health["status"] == "ok", health
    print(f"{stage}: killed -> next turn answered in {recovered_s:.2f} s")
