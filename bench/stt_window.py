"""Benchmark: speech-to-text time and word error rate, Whisper's 30 s window vs a short window.

Speaks a fixed set of sentences with espeak-ng (two voices, two speeds), transcribes each with
``WhisperSTT(window_s=0)`` (faster-whisper's own 30 s decoding, the baseline) and with
``window_s=W`` (the default), interleaved, and prints JSON: per configuration the mean and p95
time and the word error rate against the script, and the speed-up ratio.

    python bench/stt_window.py [--window-s 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SENTENCES = [
    "What is the capital of France?", "How far away is the moon?",
    "Name a fruit that is yellow.", "Why is the sky blue?",
    "I would like to book a table for two people tomorrow at seven in the evening, near the "
    "window if possible.",
    "Yes.", "No thanks, that's all.",
    "Can you tell me my account balance and the date of my last payment please?",
    "The quick brown fox jumps over the lazy dog while the farmer watches from his old wooden "
    "porch in the afternoon sun.",
    "Stop please, I have a question.", "Turn on the lights in the kitchen.",
    "My order number is four five seven two nine and it has not arrived yet.",
]
VOICES = [("en-us", 140), ("en-us", 175), ("en-gb+m3", 140), ("en-gb+m3", 175)]


def speak(text: str, voice: str, speed: int, folder: Path) -> np.ndarray:
    from voice_server.pipeline.audio import decode_wav

    raw, out = folder / "raw.wav", folder / "out.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out), "pad",
                    "0.3", "0.2"], check=True)
    return decode_wav(out.read_bytes(), max_seconds=60, to_rate=16000)


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        prev, row[0] = row[:], i
        for j in range(1, len(hyp) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ref[i - 1] != hyp[j - 1]))
    return row[-1]


def differ(sample: dict[str, str]) -> bool:
    return len({" ".join(words(v)) for k, v in sample.items() if k != "text"}) > 1


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from voice_server.compute import ComputePool
    from voice_server.pipeline.stt import WhisperSTT

    with tempfile.TemporaryDirectory() as tmp:
        clips = [(text, speak(text, voice, speed, Path(tmp)))
                 for text in SENTENCES for voice, speed in VOICES]
    configs = {"full_30s": 0.0, f"window_{args.window_s:g}s": args.window_s}
    out: dict[str, dict] = {}
    async with ComputePool(1) as pool:
        engines = {name: WhisperSTT(pool, threads=args.threads, window_s=w)
                   for name, w in configs.items()}
        for engine in engines.values():
            await engine.load()
        times: dict[str, list[float]] = {name: [] for name in configs}
        errors = dict.fromkeys(configs, 0)
        total = 0
        samples = []
        for text, pcm in clips:
            ref = words(text)
            total += len(ref)
            sample = {"text": text}
            for name, engine in engines.items():  # interleaved
                t0 = time.perf_counter()
                hyp = await engine.transcribe(pcm)
                times[name].append((time.perf_counter() - t0) * 1000)
                errors[name] += edit_distance(ref, words(hyp))
                sample[name] = hyp
            samples.append(sample)
    for name in configs:
        t = np.array(times[name])
        out[name] = {"mean_ms": round(float(t.mean()), 1),
                     "p95_ms": round(float(np.percentile(t, 95)), 1),
                     "wer": round(errors[name] / total, 3)}
    base, short = out["full_30s"], out[f"window_{args.window_s:g}s"]
    print(json.dumps({"bench": "stt_window", "utterances": len(clips), "threads": args.threads,
                      "results": out,
                      "speedup_mean": round(base["mean_ms"] / short["mean_ms"], 2),
                      "wer_delta": round(short["wer"] - base["wer"], 3),
                      "differences": [s for s in samples if differ(s)]},
                     indent=2))


if __name__ == "__main__":
    asyncio.run(main())
