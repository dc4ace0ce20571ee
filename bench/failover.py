"""Benchmark: how long a conversation is gone after its instance is killed (issue 20, item 6).

Two ``voice-server serve`` processes share one real ``redis-server`` (all on 127.0.0.1). Each
round: a client opens a session on A, A is killed with SIGKILL (no drain, no release: its lease
stays in Redis), the client reconnects to B with ``reconnect{sessionId}``; timed from the kill
to B's ``reconnect-ack{success: true}``. A is started again for the next round.

The baseline, in the same run, is the same with A's heartbeat ignored (``heartbeat_s`` longer
than the lease): what a reconnect waited before, the dead owner's lease running out, or (with
the 15 s lease and the 8 s claim wait) a failed resume.

    python bench/failover.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_redis(workdir: str) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        "redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", workdir,
        "--save", "", "--appendonly", "no", stdout=asyncio.subprocess.DEVNULL)
    for _ in range(100):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError("redis-server did not start")


async def start_serve(store: str, *extra: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "voice_server.cli", "serve", "--port", "0",
        "--preload-models", "false", "--log-level", "WARNING", "--session-store", store,
        "--llm-provider", "openai_compat", "--llm-base-url", "http://127.0.0.1:9/v1",
        "--llm-model", "none", *extra, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    while line := (await proc.stdout.readline()).decode():
        if match := re.search(r"ws://127\.0\.0\.1:(\d+)/ws", line):
            return proc, int(match.group(1))
    raise RuntimeError("voice-server serve exited before it was ready")


async def one_round(store: str, b_port: int, extra: list[str]) -> tuple[float, bool]:
    a, a_port = await start_serve(store, *extra)
    try:
        async with websockets.connect(f"ws://127.0.0.1:{a_port}/ws") as ws:
            session_id = json.loads(await ws.recv())["id"]
            await asyncio.sleep(0.3)  # a few heartbeats and lease renewals
            a.send_signal(signal.SIGKILL)
            killed = time.monotonic()
        async with websockets.connect(f"ws://127.0.0.1:{b_port}/ws") as ws:
            await ws.recv()  # ready
            await ws.send(json.dumps({"type": "reconnect", "sessionId": session_id}))
            while (msg := json.loads(await ws.recv()))["type"] != "reconnect-ack":
                pass
            return time.monotonic() - killed, bool(msg["success"])
    finally:
        if a.returncode is None:
            a.kill()
        await a.wait()


async def system(store: str, rounds: int, extra: list[str]) -> dict:
    b, b_port = await start_serve(store, *extra)
    try:
        results = [await one_round(store, b_port, extra) for _ in range(rounds)]
    finally:
        b.terminate()
        await b.wait()
    times = [t for t, _ in results]
    return {"rounds": rounds, "resumed": sum(ok for _, ok in results),
            "p50_s": round(statistics.median(times), 2), "max_s": round(max(times), 2),
            "times_s": [round(t, 2) for t in times]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        redis, store = await start_redis(workdir)
        try:
            ours = await system(store, args.rounds, [])
            baseline = await system(store, args.rounds, ["--session-heartbeat-s", "60"])
        finally:
            redis.terminate()
            await redis.wait()
    print(json.dumps({"ours": ours, "baseline_lease_wait": baseline,
                      "speedup_p50": round(baseline["p50_s"] / ours["p50_s"], 1)}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
