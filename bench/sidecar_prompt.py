"""Benchmark of the prompt sidecar's own overhead, against an instant in-process model.

The sidecar runs in a child process (its own core); this process drives it over loopback:
Connect JSON and gRPC-JSON, one request at a time (latency) and many at once (throughput), plus
the in-process cost of ``PromptService.run`` (store lookup, request building, response
normalization). Prints one JSON object. Targets (issue 7): p50 overhead under 2 ms; 1,000
requests/s on one core.

    python bench/sidecar_prompt.py [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voice_server.adapters.prompt import PromptSidecar, ToolConfig, open_service  # noqa: E402
from voice_server.llm.types import ChatRequest, ChatResult, StreamEvent, Usage  # noqa: E402

BODY = {"tool_name": "instant", "input": "Say hello in one short line.", "max_output_tokens": 16}


class InstantProvider:
    """A model that answers at once: what remains is the sidecar's own cost."""

    name = "instant"
    default_model = "instant-1"
    supports_vision = False

    async def complete(self, request: ChatRequest) -> ChatResult:
        return ChatResult(text="Hello!", model=self.default_model, usage=Usage(12, 2))

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield StreamEvent(text="Hello!")
        yield StreamEvent(done=True, usage=Usage(12, 2))

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        return [[0.0] for _ in texts]

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        return {"status": "ok"}

    async def aclose(self) -> None:
        return None


KINDS = {"instant": lambda spec, registry: InstantProvider()}


async def _prepare(db: str) -> None:
    async with open_service(db=db, kinds=KINDS) as service:
        await service.store.put(ToolConfig(name="instant", provider="instant", model="instant-1"))


def _serve(db: str, conn: Any) -> None:
    """Child process: run the sidecar, pinned to one core, until the parent says stop."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})

    async def main() -> None:
        async with open_service(db=db, kinds=KINDS) as service, \
                PromptSidecar(service, port=0, grpc_port=0) as sidecar:
            conn.send((sidecar.port, sidecar.grpc_port))
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)

    asyncio.run(main())


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": round(pick(0.5) * 1000, 3), "p95_ms": round(pick(0.95) * 1000, 3),
            "p99_ms": round(pick(0.99) * 1000, 3),
            "mean_ms": round(statistics.fmean(samples) * 1000, 3)}


async def _connect(port: int, n: int, concurrency: int) -> dict[str, Any]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/prompt.v1.PromptService/Run"
    data = json.dumps(BODY).encode()
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        async def one() -> float:
            start = time.perf_counter()
            async with http.post(url, data=data, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")
            return time.perf_counter() - start

        for _ in range(50):
            await one()
        latency = [await one() for _ in range(n)]
        throughput = await _throughput(one, n, concurrency)
    return {"sequential": _summary(latency), **throughput}


async def _grpc(port: int, n: int, concurrency: int) -> dict[str, Any]:
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/prompt.v1.PromptService/Run")
        data = json.dumps(BODY).encode()

        async def one() -> float:
            start = time.perf_counter()
            await call(data, timeout=10)
            return time.perf_counter() - start

        for _ in range(50):
            await one()
        latency = [await one() for _ in range(n)]
        throughput = await _throughput(one, n, concurrency)
    return {"sequential": _summary(latency), **throughput}


async def _throughput(one: Any, n: int, concurrency: int) -> dict[str, Any]:
    queue = iter(range(n))

    async def worker() -> None:
        for _ in queue:
            await one()

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for i in range(concurrency):
            group.create_task(worker(), name=f"bench-worker-{i}")
    elapsed = time.perf_counter() - start
    return {"concurrency": concurrency, "requests_per_s": round(n / elapsed, 1)}


async def _in_process(db: str, n: int) -> dict[str, Any]:
    from voice_server.adapters.prompt import parse_run_request

    async with open_service(db=db, kinds=KINDS) as service:
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            await service.run(parse_run_request(json.dumps(BODY).encode()))
            samples.append(time.perf_counter() - start)
    return _summary(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "tools.sqlite3")
        asyncio.run(_prepare(db))
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(db, child), name="prompt-sidecar")
        proc.start()
        try:
            port, grpc_port = parent.recv()
            result = {
                "benchmark": "sidecar_prompt",
                "model": "instant in-process provider (no model time)",
                "store": "sqlite",
                "cpu_count": os.cpu_count(),
                "service_run_in_process": asyncio.run(_in_process(db, args.requests)),
                "connect_json": asyncio.run(_connect(port, args.requests, args.concurrency)),
                "grpc_json": asyncio.run(_grpc(grpc_port, args.requests, args.concurrency)),
            }
        finally:
            parent.send("stop")
            proc.join(10)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
