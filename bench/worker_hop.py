"""Benchmark: what running a model in its worker process costs, stage by stage.

Each stage's service (the code that runs in the worker) is timed in this process and through
its supervised worker, alternating, on the same input: Piper on a first piece, Whisper on a
2-second question, the embedded LLM's first token and its next 31 tokens. Prints JSON with the
medians and the difference (worker - in process) per stage.

    python bench/worker_hop.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from voice_server.workers import OFFLINE_ENVIRONMENT  # noqa: E402

# onnxruntime (the Piper voice, Smart Turn, Pipecat's models) reads it when imported
os.environ.update(OFFLINE_ENVIRONMENT)

TEXT = "What is the capital of France?"


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    from voice_server.compute import ComputePool
    from voice_server.llm.local import LocalLlamaProvider, tiny_gguf_path
    from voice_server.llm.local_model import LlamaService
    from voice_server.llm.local_requests import SamplingParams
    from voice_server.llm.types import ChatRequest
    from voice_server.pipeline.audio import resample
    from voice_server.pipeline.stt import WhisperService, WhisperSTT, default_whisper_dir
    from voice_server.pipeline.tts import PiperService, PiperTTS, default_piper_voice

    pool = ComputePool(2)
    piper = PiperService(voice=str(default_piper_voice()))
    whisper = WhisperService(model=str(default_whisper_dir()))
    llama = LlamaService(model_path=str(tiny_gguf_path()), others=pool.shared)
    tts, stt = PiperTTS(pool), WhisperSTT(pool)
    llm = LocalLlamaProvider(others=pool.shared)
    await asyncio.gather(tts.load(), stt.load(), llm.load())
    pcm = resample(piper.synthesize(TEXT, False), piper.sample_rate, 16000)
    messages = [{"role": "user", "content": TEXT}]
    times: dict[str, dict[str, list[float]]] = {
        s: {"in_process": [], "worker": []} for s in ("tts", "stt", "llm_first", "llm_next_31")}

    def llm_in_process() -> tuple[float, float]:
        import threading

        stamps: list[float] = []
        done = threading.Event()

        def deliver(item):
            stamps.append(time.perf_counter())
            if not isinstance(item, str):
                done.set()
            elif len(stamps) >= 32:
                done.set()

        started = time.perf_counter()
        gen = llama._engine.submit(messages, SamplingParams(temperature=0.0, max_tokens=32),
                                   lambda item: (deliver(item), llama._engine.consumed(gen)))
        done.wait(60)
        llama._engine.cancel(gen)
        return stamps[0] - started, stamps[-1] - stamps[0]

    async def llm_worker() -> tuple[float, float]:
        request = ChatRequest(messages=messages, temperature=0.0, max_tokens=32)
        stamps, started = [], time.perf_counter()
        async for event in llm.stream(request):
            if event.text:
                stamps.append(time.perf_counter())
        return stamps[0] - started, stamps[-1] - stamps[0]

    for _ in range(args.rounds):
        t = time.perf_counter()
        piper.synthesize(TEXT, False)
        times["tts"]["in_process"].append(time.perf_counter() - t)
        t = time.perf_counter()
        await tts.synthesize(TEXT, urgent=True)
        times["tts"]["worker"].append(time.perf_counter() - t)
        t = time.perf_counter()
        whisper.transcribe(pcm)
        times["stt"]["in_process"].append(time.perf_counter() - t)
        t = time.perf_counter()
        await stt.transcribe(pcm)
        times["stt"]["worker"].append(time.perf_counter() - t)
        for where, (first, rest) in (("in_process", llm_in_process()),
                                     ("worker", await llm_worker())):
            times["llm_first"][where].append(first)
            times["llm_next_31"][where].append(rest)
    result = {}
    for stage, runs in times.items():
        inp, wrk = _median_ms(runs["in_process"]), _median_ms(runs["worker"])
        result[stage] = {"in_process_ms": inp, "worker_ms": wrk,
                         "worker_minus_in_process_ms": round(wrk - inp, 1)}
    print(json.dumps({"bench": "worker_hop", "rounds": args.rounds, "medians": result}, indent=1))
    await asyncio.gather(tts.aclose(), stt.aclose(), llm.aclose())
    llama.close()
    pool.close()


if __name__ == "__main__":
    asyncio.run(main())
