"""Soak benchmark: many WebSocket-path sessions for a long time against one server process.

The real server runs as a subprocess (real Whisper STT and Piper TTS; the LLM is the scripted
OpenAI-compatible server of the tests, answering one short sentence). ``--sessions`` clients
each loop: send an ``audio`` message (espeak-ng speech), read up to ``tts-complete``, think,
and every few turns drop the socket and continue with ``reconnect{sessionId}``. Every few
seconds the server's RSS, open files and asyncio task count (its ``voice_asyncio_tasks``
metric) are sampled. Prints JSON: the series, RSS growth after warm-up, tasks before and after
(leaked = after all sessions closed - before they started), errors by code, turn latency and
pass/fail against issue 9's targets (growth < 5 %, no leaked task, no error).

    python bench/soak.py --sessions 20 --duration-s 600
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUESTION = "What time does the shop open tomorrow?"
ANSWER = "It opens at nine."


def speech_wav(text: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        raw, out = Path(tmp, "raw.wav"), Path(tmp, "out.wav")
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(raw), text], check=True)
        subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out), "pad",
                        "0.3", "0.3"], check=True)
        return out.read_bytes()


class ServerProcess:
    """``voice-server serve`` in a subprocess on a free loopback port."""

    def __init__(self, llm_url: str, extra: list[str]) -> None:
        self.cmd = [sys.executable, "-c", "import sys; from voice_server.cli import main; "
                    "sys.exit(main())", "serve", "--host", "127.0.0.1", "--port", "0",
                    "--llm-provider", "openai_compat", "--llm-base-url", llm_url,
                    "--llm-model", "fake-model", "--log-level", "INFO", *extra]
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    async def __aenter__(self) -> ServerProcess:
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=subprocess.DEVNULL,  # noqa: ASYNC220
                                     stderr=subprocess.PIPE)
        self.port = await asyncio.to_thread(self._port_from_log)
        await self.wait_healthy()
        return self

    def _port_from_log(self) -> int:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            if match := re.search(rb"listening on ws://[\d.]+:(\d+)/ws", raw):
                # keep draining stderr so the server never blocks on a full pipe
                threading.Thread(target=self._drain, daemon=True, name="soak-stderr").start()
                return int(match.group(1))
        raise RuntimeError("the server exited before listening")

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            if b"Traceback" in raw or b"ERROR" in raw:
                sys.stderr.write("server: " + raw.decode(errors="replace"))

    async def wait_healthy(self, timeout: float = 120) -> None:
        import aiohttp

        async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{self.port}/health") as resp:
                        if resp.status == 200:
                            return
                await asyncio.sleep(0.5)

    async def metric(self, name: str) -> dict[str, float]:
        """Values of one Prometheus metric by label set (``""`` when unlabelled)."""
        import aiohttp

        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{self.port}/metrics") as resp:
            text = await resp.text()
        out = {}
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key[len(name):]] = float(value)
        return out

    def sample(self) -> dict[str, float]:
        import psutil

        assert self.proc is not None
        p = psutil.Process(self.proc.pid)
        tree = [p, *p.children(recursive=True)]  # the server and its model workers
        return {"rss_mb": round(sum(q.memory_info().rss for q in tree) / 2**20, 1),
                "fds": sum(q.num_fds() for q in tree),
                "threads": sum(q.num_threads() for q in tree)}

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Stats:
    def __init__(self) -> None:
        self.turns = 0
        self.latency_ms: list[float] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.reconnects = 0


async def session_loop(url: str, audio_b64: str, stop: asyncio.Event, stats: Stats, *,
                       think_s: float, reconnect_every: int) -> None:
    import websockets

    session_id: str | None = None
    while not stop.is_set():
        try:
            async with websockets.connect(url, max_size=None) as ws:
                ready = json.loads(await ws.recv())
                if session_id is None:
                    session_id = ready["id"]
                else:
                    await ws.send(json.dumps({"type": "reconnect", "sessionId": session_id}))
                    ack = json.loads(await ws.recv())
                    if ack.get("type") != "reconnect-ack" or not ack.get("success"):
                        stats.errors["RECONNECT_FAILED"] += 1
                    stats.reconnects += 1
                for _ in range(reconnect_every):
                    if stop.is_set():
                        break
                    await one_turn(ws, audio_b64, stats)
                    await asyncio.sleep(think_s)
        except Exception as exc:  # noqa: BLE001 - every failure is counted as an error
            if stop.is_set():
                return
            stats.errors[f"client:{type(exc).__name__}"] += 1
            await asyncio.sleep(1.0)


async def one_turn(ws: Any, audio_b64: str, stats: Stats) -> None:
    started = time.monotonic()
    await ws.send(json.dumps({"type": "audio", "data": audio_b64}))
    first = None
    async with asyncio.timeout(120):
        while True:
            msg = json.loads(await ws.recv())
            kind = msg["type"]
            if kind == "tts-chunk" and first is None:
                first = time.monotonic()
            elif kind == "error":
                stats.errors[msg["code"]] += 1
                return
            elif kind == "tts-complete":
                break
    stats.turns += 1
    if first is not None:
        stats.latency_ms.append((first - started) * 1000)


async def run_soak(*, sessions: int, duration_s: float, think_s: float = 1.0,
                   reconnect_every: int = 5, sample_every_s: float = 5.0,
                   warmup_s: float | None = None) -> dict[str, Any]:
    """Run the soak; returns the result dict (also used by the short CI test)."""
    from tests.support.fake_openai import FakeOpenAI

    audio_b64 = base64.b64encode(speech_wav(QUESTION)).decode()
    warmup_s = min(60.0, duration_s * 0.2) if warmup_s is None else warmup_s
    async with FakeOpenAI(default_text=ANSWER) as fake, ServerProcess(fake.base_url, []) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        tasks_before = (await server.metric("voice_asyncio_tasks")).get("", 0)
        stats, stop = Stats(), asyncio.Event()
        clients = [asyncio.create_task(session_loop(url, audio_b64, stop, stats,
                                                    think_s=think_s,
                                                    reconnect_every=reconnect_every),
                                       name=f"soak-client-{i}") for i in range(sessions)]
        series = []
        t0 = time.monotonic()
        while (elapsed := time.monotonic() - t0) < duration_s:
            await asyncio.sleep(min(sample_every_s, max(0.0, duration_s - elapsed)))
            tasks = (await server.metric("voice_asyncio_tasks")).get("", 0)
            series.append({"t_s": round(time.monotonic() - t0, 1), **server.sample(),
                           "tasks": tasks, "turns": stats.turns})
        stop.set()
        for task in clients:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 150)
        await asyncio.sleep(2.0)  # let the server notice every close
        tasks_after = (await server.metric("voice_asyncio_tasks")).get("", 0)
        server_errors = await server.metric("voice_errors_total")
        final = server.sample()
    after_warmup = [s for s in series if s["t_s"] >= warmup_s] or series
    base, last = after_warmup[0]["rss_mb"], after_warmup[-1]["rss_mb"]
    growth = round((last / base - 1) * 100, 2)
    lat = np.array(stats.latency_ms) if stats.latency_ms else np.zeros(1)
    errors = dict(stats.errors)
    leaked = int(tasks_after - tasks_before)
    return {
        "bench": "soak", "sessions": sessions, "duration_s": duration_s, "warmup_s": warmup_s,
        "turns": stats.turns, "reconnects": stats.reconnects,
        "first_audio_ms": {"p50": round(float(np.percentile(lat, 50)), 1),
                           "p95": round(float(np.percentile(lat, 95)), 1)},
        "rss_mb": {"after_warmup": base, "end": last, "max": max(s["rss_mb"] for s in series),
                   "after_close": final["rss_mb"]},
        "rss_growth_pct": growth,
        "tasks": {"before": tasks_before, "after_close": tasks_after, "leaked": leaked},
        "errors": errors,
        "server_errors_by_code": {k: v for k, v in server_errors.items() if v},
        "pass": {"rss_growth_under_5pct": growth < 5.0, "no_leaked_tasks": leaked <= 0,
                 "no_errors": not errors},
        "series": series,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--duration-s", type=float, default=600)
    parser.add_argument("--think-s", type=float, default=1.0)
    parser.add_argument("--reconnect-every", type=int, default=5, help="turns per connection")
    parser.add_argument("--sample-every-s", type=float, default=5.0)
    args = parser.parse_args()
    result = asyncio.run(run_soak(sessions=args.sessions, duration_s=args.duration_s,
                                  think_s=args.think_s, reconnect_every=args.reconnect_every,
                                  sample_every_s=args.sample_every_s))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
