"""Benchmark: voice-to-voice and barge-in latency over WebRTC with a scripted aiortc peer.

Prints JSON: p50/p95/max of voice-to-voice (end of speech in the WAV -> first non-silent agent
audio frame received), barge-in reaction (onset of interrupting speech -> agent audio silent), and
the server's per-stage turn records. Runs the embedded local LLM and, in the same run, a baseline
whose LLM is an instant scripted server (the pipeline's floor), and prints their ratio.

    python bench/voice_latency.py --turns 6 --barge-ins 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._netns import reexec_in_private_netns  # noqa: E402

QUESTIONS = ["What is the capital of France?", "How far away is the moon?",
             "Name a fruit that is yellow.", "Why is the sky blue?",
             "What do cats like to eat?", "What is two plus two?"]
LONG = ("Let me tell you a long story about the sea. The waves roll in slowly every morning. "
        "Fishermen go out before the sun rises. They bring back fish for the market. Children "
        "play on the warm sand all day. In the evening the lighthouse shines across the water.")
LOUD = 300.0  # RMS of a 20 ms frame that counts as agent speech


def speech48k(text: str, folder: Path, pad=(1.0, 1.2)) -> bytes:
    raw, out = folder / "raw.wav", folder / f"{abs(hash((text, pad)))}.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", "48000", "-c", "1", "-b", "16", str(out), "pad",
                    str(pad[0]), str(pad[1])], check=True)
    return out.read_bytes()


def stats(values: list[float]) -> dict:
    v = sorted(x for x in values if x is not None)
    if not v:
        return {"n": 0}
    return {"n": len(v), "p50": round(float(np.percentile(v, 50)), 1),
            "p95": round(float(np.percentile(v, 95)), 1), "max": round(max(v), 1)}


def speech_bounds(pcm48: np.ndarray) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(pcm48) > 500)
    return loud[0] / 48000, loud[-1] / 48000


async def voice_turns(url: str, wavs: list[bytes], turns: int) -> tuple[list[float], list]:
    from tests.rtc.peer import RtcClient
    from voice_server.pipeline.audio import decode_wav, rms

    v2v: list[float] = []
    async with RtcClient(url) as client:
        await client.negotiate()
        for i in range(turns):
            wav = wavs[i % len(wavs)]
            pcm = decode_wav(wav, max_seconds=60, to_rate=48000)
            _, end_off = speech_bounds(pcm)
            clip = client.mic.enqueue(pcm)
            await clip.started.wait()
            speech_end = clip.started_at + end_off
            n_done = len(client.messages("tts-complete")) + 1
            await client.wait_for("tts-complete", count=n_done, timeout=120)
            first = next((t for t, f in client.heard if t > speech_end and rms(f) > LOUD), None)
            v2v.append((first - speech_end) * 1000 if first else None)
            await asyncio.sleep(0.5)
    return v2v, []


async def barge_ins(url: str, fake, story: bytes, interrupt: bytes, n: int) -> list[float]:
    from tests.rtc.peer import RtcClient
    from voice_server.pipeline.audio import decode_wav, rms

    reactions: list[float] = []
    pcm_int = decode_wav(interrupt, max_seconds=60, to_rate=48000)
    onset_off, _ = speech_bounds(pcm_int)
    async with RtcClient(url) as client:
        await client.negotiate()
        for i in range(n):
            fake.add(LONG, "Okay.")
            client.mic.enqueue(decode_wav(story, max_seconds=60, to_rate=48000))
            await client.wait_for("tts-start", count=2 * i + 1, timeout=120)
            await asyncio.sleep(1.5)
            clip = client.mic.enqueue(pcm_int)
            await clip.started.wait()
            onset = clip.started_at + onset_off
            await client.wait_for("tts-cancelled", count=i + 1, timeout=60)
            await asyncio.sleep(1.0)
            loud = [t for t, f in client.heard if onset <= t <= onset + 2.0 and rms(f) > LOUD]
            # the agent audio stops: last loud frame of the interrupted answer after the onset
            reactions.append(((max(loud) if loud else onset) - onset) * 1000)
            try:
                await client.wait_for("tts-complete", count=i + 1, timeout=60)
            except TimeoutError:
                print([m for m in client.messages() if m["type"] != "llm-chunk"], file=sys.stderr)
                raise
            await asyncio.sleep(0.5)
    return reactions


def server_stages(server, since: int) -> dict:
    records = list(server.last_turns)[since:]
    s = [r.summary() for r in records if not r.interrupted]
    return {k: stats([x[k] for x in s]) for k in ("stt_ms", "llm_ttft_ms", "tts_first_audio_ms",
                                                   "first_audio_ms")}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--barge-ins", type=int, default=4)
    args = parser.parse_args()

    from tests.support.fake_openai import FakeOpenAI
    from voice_server.config import load_settings
    from voice_server.server.app import VoiceServer

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wavs = [speech48k(q, folder) for q in QUESTIONS]
        story = speech48k("Tell me a story.", folder)
        interrupt = speech48k("Stop please, I have a question.", folder, pad=(0.0, 1.2))
    common = {"port": 0, "ice_host_addresses": "127.0.0.1", "interim_transcripts": False}
    result: dict = {"bench": "voice_latency", "cpu_count": os.cpu_count()}
    async with FakeOpenAI(default_text="Paris is the capital of France.") as fake:
        settings = load_settings(llm_provider="openai_compat", llm_base_url=fake.base_url,
                                 llm_model="fake", **common)
        async with VoiceServer(settings) as server:
            url = f"ws://127.0.0.1:{server.port}/ws"
            v2v, _ = await voice_turns(url, wavs, args.turns)
            result["baseline_scripted_llm"] = {"voice_to_voice_ms": stats(v2v),
                                               "server_stages": server_stages(server, 0)}
            since = len(server.last_turns)
            reactions = await barge_ins(url, fake, story, interrupt, args.barge_ins)
            barge = [r.summary()["barge_in_ms"] for r in list(server.last_turns)[since:]
                     if r.interrupted]
            result["barge_in"] = {"reaction_ms_client": stats(reactions),
                                  "server_cancel_ms": stats(barge)}
    async with VoiceServer(load_settings(llm_max_tokens=60, **common)) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        started = time.monotonic()
        v2v, _ = await voice_turns(url, wavs, args.turns)
        result["local_llm"] = {"voice_to_voice_ms": stats(v2v),
                               "server_stages": server_stages(server, 0),
                               "wall_s": round(time.monotonic() - started, 1)}
    base = result["baseline_scripted_llm"]["voice_to_voice_ms"].get("p50")
    local = result["local_llm"]["voice_to_voice_ms"].get("p50")
    result["ratio_local_vs_baseline_p50"] = round(local / base, 2) if base and local else None
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    reexec_in_private_netns()
    asyncio.run(main())
