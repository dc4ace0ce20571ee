"""SIGKILL of every model worker of a serving server in the middle of a spoken WebRTC turn
(issue 17): the server process, the connection and the session live on, the turn in flight
ends with an error, and the next spoken turn is answered on the audio track."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import psutil
import pytest
import pytest_asyncio

from tests.conftest import scaled
from tests.rtc.peer import RtcClient
from voice_server.config import load_settings
from voice_server.pipeline.audio import rms
from voice_server.server.app import VoiceServer
from voice_server.workers import RestartPolicy, WorkerState

pytestmark = pytest.mark.slow


@pytest_asyncio.fixture(scope="module")
async def server():
    """The default models, the embedded LLM included: three workers to kill."""
    settings = load_settings(port=0, llm_max_tokens=40, llm_temperature=0.0,
                             ice_host_addresses="127.0.0.1",
                             ice_candidate_allow="127.0.0.1", interim_transcripts=False)
    async with VoiceServer(settings) as srv:
        yield srv


def workers(server: VoiceServer) -> list:
    return [server.stt.worker, server.tts.worker, server.router.providers["local"].worker]


async def test_killing_every_worker_mid_turn_costs_one_turn(server, make_speech,
                                                           monkeypatch) -> None:
    for worker in workers(server):  # restarts wait 3 s, so /health is read while they pend
        monkeypatch.setattr(worker, "policy", RestartPolicy(first_delay_s=3.0))
    me = psutil.Process()
    pids = {w.pid for w in workers(server)}
    assert pids <= {child.pid for child in me.children()}  # they are this server's processes
    # a long answer (40 tokens at most, ~1 s of generation): a short one ("The capital of
    # France is Paris.") was sometimes all generated and spoken when the kill came, with no
    # request in flight to fail
    question = make_speech("Tell me a long story about a dragon.", rate=48000, pad=(1.0, 1.5))
    async with RtcClient(f"ws://127.0.0.1:{server.port}/ws") as client:
        await client.negotiate()
        session = client.ready["id"]
        client.say(question)
        await client.wait_for("llm-chunk", timeout=scaled(60))  # the answer is under way
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        error = await client.wait_for("error", timeout=scaled(30))
        assert error["code"] in ("LLM_ERROR", "TTS_ERROR"), error
        assert not client.messages("tts-complete")
        assert (await server.health())["status"] == "degraded"

        async with asyncio.timeout(scaled(60)):  # every worker is back
            while any(w.state is not WorkerState.READY for w in workers(server)):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        recovered_s = time.monotonic() - killed
        assert {w.pid for w in workers(server)}.isdisjoint(pids)
        assert all(w.restarts == 1 for w in workers(server))

        client.say(question)  # the same connection and session, the next spoken turn
        # its first second of speech is the proof (the whole story would take ~8 s more)
        await client.wait_for("tts-start", count=len(client.messages("tts-start")) + 1,
                              timeout=scaled(60))
        start = client.first_time("tts-start", after=killed)
        assert start is not None
        await asyncio.sleep(1.2)
        assert rms(client.heard_between(start, start + 1.0)) > 300
        transcripts = client.messages("transcript")
        assert "dragon" in transcripts[-1]["text"].lower()
        assert session in server.live  # the same session, still attached
    assert (await server.health())["status"] == "ok"
    print(f"every worker killed -> all back in {recovered_s:.2f} s")
