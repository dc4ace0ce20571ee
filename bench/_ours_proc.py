"""voice_server in its own process for the latency benchmark (so CPU and RSS are its own).

``python bench/_ours_proc.py '{"llm_provider": ...}'`` prints ``{"port": N}`` once serving, then
answers each ``dump`` line on stdin with one JSON line: the turn records since the last dump and
event-loop lag (how late a 20 ms timer fires: blocking work on the loop shows up here); a
``warm`` line, once the playbooks' stage prompts are computed (``{"warm_s": ...}``).
EOF on stdin stops it. With ``BENCH_SERVER_LOG=FILE`` in the environment the server and its
model workers log at DEBUG to FILE (each end-of-turn verdict and its reasons, barge-in
decisions, the LLM's prompt tokens and how many were cached).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TICK_S = 0.02


async def watch_loop_lag(lags: collections.deque[float]) -> None:
    while True:
        due = time.monotonic() + TICK_S
        await asyncio.sleep(TICK_S)
        lags.append((time.monotonic() - due) * 1000)


def record_json(rec) -> dict:
    origin = rec.speech_end or rec.started
    stamps = {k: (round((v - origin) * 1000, 1) if isinstance(v, float) else v)
              for k, v in rec.as_dict().items()
              if k in ("stt_done", "llm_requested", "llm_first_token", "first_chunk",
                       "tts_synth_start", "tts_synth_done", "first_audio", "finished")}
    return {**rec.summary(), "at": stamps, "speculative_stt": rec.speculative_stt,
            "transcript": rec.transcript}


def log_server_to(log_file: str | None) -> None:
    """With a file (``BENCH_SERVER_LOG``): the server's own account there, at DEBUG."""
    if not log_file:
        return
    logging.basicConfig(filename=log_file, level=logging.DEBUG,
                        format="%(created).3f %(name)s %(message)s")
    # the model workers' stderr is relayed to ours: the same file (both append)
    shared = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(shared, sys.stderr.fileno())
    os.close(shared)
    for name in ("aioice", "aiortc", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)


async def main() -> None:
    from voice_server.config import load_settings
    from voice_server.metrics import TURN_OUTCOMES
    from voice_server.server.app import VoiceServer

    log_server_to(os.environ.get("BENCH_SERVER_LOG"))
    settings = load_settings(**json.loads(sys.argv[1]))
    lags: collections.deque[float] = collections.deque(maxlen=100_000)
    async with VoiceServer(settings) as server:
        counted = dict.fromkeys(TURN_OUTCOMES, 0.0)
        counted_reasons: dict[str, float] = {}
        counted_behind: dict[str, float] = {}
        watcher = asyncio.create_task(watch_loop_lag(lags), name="bench-loop-lag")
        print(json.dumps({"port": server.port}), flush=True)
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        try:
            while line := await reader.readline():
                if line.strip() == b"warm":  # wait for the playbooks' stage prompts
                    started = time.monotonic()
                    while server.warmer.busy:  # noqa: ASYNC110 - no event announces it
                        await asyncio.sleep(0.5)
                    print(json.dumps({"warm_s": round(time.monotonic() - started, 1)}),
                          flush=True)
                elif line.strip() == b"dump":
                    turns = []
                    while server.last_turns:  # the records since the last dump, once each
                        turns.append(server.last_turns.popleft())
                    now = {o: server.metrics.registry.get_sample_value(
                        "voice_turns_total", {"outcome": o}) or 0.0 for o in TURN_OUTCOMES}
                    reasons = server.metrics.taken_back_by_reason()
                    behind = _frames_behind(server.metrics.registry)
                    out = {"turns": [record_json(r) for r in turns],
                           # Prometheus' count since the last dump (taken-back turns are in
                           # no turn record), and the end-of-turn reasons of those taken back
                           "outcomes": {o: int(now[o] - counted[o]) for o in TURN_OUTCOMES},
                           "taken_back_reasons": {
                               reason: int(value - counted_reasons.get(reason, 0.0))
                               for reason, value in reasons.items()
                               if value > counted_reasons.get(reason, 0.0)},
                           "loop_lag_ms": sorted(lags),
                           # inbound frames by how long they waited for the server
                           "audio_behind": {k: int(v - counted_behind.get(k, 0.0))
                                            for k, v in behind.items()}}
                    counted, counted_reasons, counted_behind = now, reasons, behind
                    lags.clear()
                    print(json.dumps(out), flush=True)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


def _frames_behind(registry: Any) -> dict[str, float]:
    """``voice_audio_behind_seconds`` so far: the frames, and those that waited over 0.1, 0.5
    and 1 s before the server got to them."""
    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(f"voice_audio_behind_seconds_{name}", labels) or 0.0

    frames = sample("count")
    return {"frames": frames, **{f"over_{le}s": frames - sample("bucket", le=le)
                                 for le in ("0.1", "0.5", "1.0")}}


if __name__ == "__main__":
    asyncio.run(main())
