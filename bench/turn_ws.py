"""Benchmark: N turns over the WebSocket fallback path (audio message -> tts-complete).

Prints one JSON object: per-stage p50/p95 from the server's turn records (STT ms, LLM TTFT ms,
TTS first audio ms), request-to-first-``tts-chunk`` ms measured by the client, and STT/TTS
real-time factors. A baseline measured in the same run (a turn whose LLM is an instant scripted
server) gives the share of the latency that the local LLM adds.

    python bench/turn_ws.py --turns 10 [--llm local|scripted|both]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fake_openai import FakeOpenAI  # noqa: E402
from voice_server.config import load_settings  # noqa: E402
from voice_server.pipeline.audio import decode_wav  # noqa: E402
from voice_server.server.app import VoiceServer  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "How far away is the moon?",
    "Tell me a fun fact about cats.",
    "What should I cook for dinner tonight?",
    "Why is the sky blue?",
]


def pct(values: list[float], q: float) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    return round(float(np.percentile(values, q)), 1)


def speech(text: str, folder: Path) -> bytes:
    raw, out = folder / "raw.wav", folder / f"{abs(hash(text))}.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out), "pad",
                    "0.3", "0.3"], check=True)
    return out.read_bytes()


async def run_turns(server: VoiceServer, wavs: list[bytes], turns: int) -> dict:
    first_chunk_ms: list[float] = []
    tts_samples = 0
    tts_rate = 22050
    async with websockets.connect(f"ws://127.0.0.1:{server.port}/ws", max_size=None) as ws:
        json.loads(await ws.recv())
        for i in range(turns):
            payload = json.dumps({"type": "audio",
                                  "data": base64.b64encode(wavs[i % len(wavs)]).decode()})
            t0 = time.perf_counter()
            await ws.send(payload)
            got_first = False
            while True:
                msg = json.loads(await ws.recv())
                if msg["type"] == "tts-chunk":
                    tts_rate = msg["sampleRate"]
                    tts_samples += len(base64.b64decode(msg["data"])) // 2
                    if not got_first:
                        first_chunk_ms.append((time.perf_counter() - t0) * 1000)
                        got_first = True
                if msg["type"] in ("tts-complete", "error"):
                    break
    records = list(server.last_turns)[-turns:]
    summaries = [r.summary() for r in records]
    stt_audio_s = sum(len(decode_wav(wavs[i % len(wavs)], max_seconds=60)) / 16000
                      for i in range(turns))
    stt_s = sum((s["stt_ms"] or 0) for s in summaries) / 1000
    tts_audio_s = tts_samples / tts_rate
    tts_busy_s = sum((r.finished - r.llm_first_token) for r in records
                     if r.finished and r.llm_first_token)
    return {
        "turns": turns,
        "stt_ms": {"p50": pct([s["stt_ms"] for s in summaries], 50),
                   "p95": pct([s["stt_ms"] for s in summaries], 95)},
        "llm_ttft_ms": {"p50": pct([s["llm_ttft_ms"] for s in summaries], 50),
                        "p95": pct([s["llm_ttft_ms"] for s in summaries], 95)},
        "tts_first_audio_ms": {"p50": pct([s["tts_first_audio_ms"] for s in summaries], 50),
                               "p95": pct([s["tts_first_audio_ms"] for s in summaries], 95)},
        "request_to_first_tts_chunk_ms": {"p50": pct(first_chunk_ms, 50),
                                          "p95": pct(first_chunk_ms, 95)},
        "stt_rtf": round(stt_s / stt_audio_s, 3) if stt_audio_s else None,
        "tts_rtf_upper_bound": round(tts_busy_s / tts_audio_s, 3) if tts_audio_s else None,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--llm", choices=["local", "scripted", "both"], default="both")
    args = parser.parse_args()
    if not (shutil.which("espeak-ng") and shutil.which("sox")):
        sys.exit("bench needs espeak-ng and sox")
    with tempfile.TemporaryDirectory() as tmp:
        wavs = [speech(q, Path(tmp)) for q in QUESTIONS]
    result: dict = {"bench": "turn_ws", "cpu_count": __import__("os").cpu_count()}
    if args.llm in ("scripted", "both"):
        async with FakeOpenAI(default_text="Paris is the capital of France. It is a lovely "
                                           "city.") as fake:
            settings = load_settings(port=0, llm_provider="openai_compat",
                                     llm_base_url=fake.base_url, llm_model="fake")
            async with VoiceServer(settings) as server:
                result["baseline_scripted_llm"] = await run_turns(server, wavs, args.turns)
    if args.llm in ("local", "both"):
        async with VoiceServer(load_settings(port=0)) as server:
            result["local_llm"] = await run_turns(server, wavs, args.turns)
    if "baseline_scripted_llm" in result and "local_llm" in result:
        base = result["baseline_scripted_llm"]["request_to_first_tts_chunk_ms"]["p50"]
        local = result["local_llm"]["request_to_first_tts_chunk_ms"]["p50"]
        result["ratio_local_vs_scripted_first_chunk_p50"] = round(local / base, 2) if base else None
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
