"""The systems the latency benchmark runs (``bench/voice_latency.py``): each in a subprocess,
ours (``bench/_ours_proc.py``) and Pipecat (``bench/pipecat_bot.py``), the CPU/RSS sampler of
a process tree, and the llama.cpp server both share in the load phases."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Sampler", "System", "build_systems", "free_port", "start_llama", "wait_http"]

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sampler:
    """CPU (100 % = one core) and RSS of a process tree, sampled every 0.5 s."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.cpu: list[float] = []
        self.rss: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def rss_mb(self) -> float:
        procs = [self.proc, *self.proc.children(recursive=True)]
        return round(sum(p.memory_info().rss for p in procs) / 2**20, 1)

    async def _run(self) -> None:
        procs = [self.proc, *self.proc.children(recursive=True)]
        for p in procs:
            p.cpu_percent(None)
        while True:
            await asyncio.sleep(0.5)
            self.cpu.append(sum(p.cpu_percent(None) for p in procs))
            self.rss.append(self.rss_mb())

    def __enter__(self) -> Sampler:
        self.cpu, self.rss = [], []
        self._task = asyncio.create_task(self._run(), name="bench-sampler")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def summary(self) -> dict[str, Any]:
        cpu = self.cpu or [0.0]
        return {"cpu_mean_pct": round(float(np.mean(cpu)), 1),
                "cpu_p95_pct": round(float(np.percentile(cpu, 95)), 1),
                "rss_mb_start": self.rss[0] if self.rss else None,
                "rss_mb_max": max(self.rss) if self.rss else None}


class System:
    """One system under test in a subprocess: ``ours`` or ``pipecat``."""

    def __init__(self, name: str, cmd: list[str], llm_url: str) -> None:
        self.name, self.cmd, self.llm_url = name, cmd, llm_url
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.sampler: Sampler | None = None

    async def __aenter__(self) -> System:
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # noqa: ASYNC220
                                     text=True, cwd=ROOT)
        line = await asyncio.to_thread(self._wait_ready)
        if self.name.startswith("ours"):
            self.url = f"ws://127.0.0.1:{json.loads(line)['port']}/ws"
        self.sampler = Sampler(self.proc.pid)
        return self

    def _wait_ready(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            if line.startswith(("{", "ready")):
                return line
        raise RuntimeError(f"{self.name} exited before it was ready")

    def client(self) -> Any:
        from bench._peers import PipecatClient, RtcClient

        return RtcClient(self.url) if self.name.startswith("ours") else PipecatClient(self.url)

    async def dump(self) -> dict[str, Any]:
        if not self.name.startswith("ours") or self.proc is None:
            return {}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("dump\n")
        self.proc.stdin.flush()
        return json.loads(await asyncio.to_thread(self.proc.stdout.readline))

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def build_systems(args: argparse.Namespace, llm_url: str, model: str, *,
                  embedded: bool = False) -> list[System]:
    """voice_server and Pipecat on the shared LLM server; with ``embedded``, also voice_server
    on its defaults (the LLM in-process), named ``ours_embedded``."""
    from voice_server.pipeline.stt import default_whisper_dir
    from voice_server.pipeline.tts import default_piper_voice

    overrides = json.loads(args.ours_settings)
    loopback = {"ice_host_addresses": "127.0.0.1", "ice_candidate_allow": "127.0.0.1"}
    ours_settings = {"port": 0, **loopback, "llm_provider": "openai_compat",
                     "llm_base_url": llm_url, "llm_model": model, "llm_max_tokens": 60,
                     **overrides}
    wanted = set(filter(None, args.only.split(",")))
    systems = [System("ours", [sys.executable, "bench/_ours_proc.py",
                               json.dumps(ours_settings)], llm_url)]
    if embedded:
        # no playbook is used: the playbooks' prompts computed ahead after start would share
        # the cores with the first turns (steady state is measured; docs/performance.md)
        own = {"port": 0, **loopback, "llm_max_tokens": 60, "warm_playbooks": False,
               **overrides}
        systems.append(System("ours_embedded", [sys.executable, "bench/_ours_proc.py",
                                                json.dumps(own)], llm_url))
    if args.pipecat_python:
        port = free_port()
        voice = default_piper_voice()
        pc = System("pipecat", [args.pipecat_python, "bench/pipecat_bot.py", "--port", str(port),
                                "--llm-url", llm_url, "--llm-model", model,
                                "--whisper-dir", str(default_whisper_dir()),
                                "--piper-dir", str(voice.parent),
                                "--piper-voice", voice.name.removesuffix(".onnx")], llm_url)
        pc.url = f"http://127.0.0.1:{port}"
        systems.append(pc)
    return [s for s in systems if not wanted or s.name in wanted]


def start_llama(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    """The llama.cpp server both systems share in the load phases, and its URL."""
    from voice_server.llm.local import tiny_gguf_path

    llama_python = args.llama_python or args.pipecat_python or sys.executable
    if subprocess.run([llama_python, "-c", "import llama_cpp.server.app"],
                      capture_output=True).returncode != 0:
        sys.exit(f"{llama_python} cannot run llama_cpp.server: give --llama-python (a venv with "
                 "llama-cpp-python[server]) or --pipecat-python, or --skip load,connections")
    port = free_port()
    llama = subprocess.Popen(
        [llama_python, "-m", "llama_cpp.server",
         "--model", str(tiny_gguf_path()), "--host", "127.0.0.1", "--port", str(port),
         "--n_threads", str(args.llm_threads), "--n_threads_batch", str(args.llm_threads),
         # its default cuts a running stream short when another request comes in: with
         # concurrent sessions, answers went missing on both systems
         "--interrupt_requests", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return llama, f"http://127.0.0.1:{port}/v1"


async def wait_http(url: str, timeout: float = 60) -> None:
    import aiohttp

    async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.2)
