"""Benchmark of the LLM caller sidecar against an instant in-process model; prints JSON.

- ``service_p50_us``: CallerService.chat alone (validation, routing, router, payload).
- ``http_chat_*``: POST /mcp/chat round trips over loopback (sequential, keep-alive), with
  the server in its own process so client and server do not share one core.
- ``http_chat_rps``: requests/s with 32 concurrent clients.
- ``sse_ttfe_*``: POST /mcp/chatStream until the first ``data:`` frame arrives.

Usage: ``python bench/sidecar_caller.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voice_server.adapters.caller import (  # noqa: E402
    CallerHTTPServer,
    CallerOptions,
    CallerService,
    ClientRegistry,
    ProviderRuntime,
    build_mcp_server,
)
from voice_server.adapters.caller.config import ProviderEntry  # noqa: E402
from voice_server.llm import ChatRequest, ChatResult, StreamEvent, Usage  # noqa: E402

TOKEN = "bench-token"
BODY = {"requestId": "b-1", "callerTool": "bench",
        "messages": [{"role": "user", "content": "hello there"}]}


class InstantProvider:
    """A model that answers at once (no I/O): what remains is the caller's own cost."""

    name = "instant"
    default_model = "instant-model"
    supports_vision = False

    async def complete(self, request: ChatRequest) -> ChatResult:
        return ChatResult(text="Hi!", model=self.default_model, usage=Usage(3, 1), id="cmpl-1")

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        for part in ("Hi", " there", "!"):
            yield StreamEvent(text=part)
        yield StreamEvent(done=True, usage=Usage(3, 3))

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        return {"status": "ok"}

    async def aclose(self) -> None:
        return None


def _service() -> CallerService:
    entry = ProviderEntry(baseUrl="http://127.0.0.1:1/v1", defaultModel="instant-model",
                          capabilities=["chat", "chatStream"],
                          defaults={"chat": "instant-model"})
    runtime = ProviderRuntime("instant", entry, chat=InstantProvider())
    return CallerService({"instant": runtime}, registry=ClientRegistry.single(TOKEN),
                         options=CallerOptions())


def _serve(port_out: Any, stop: Any) -> None:
    async def main() -> None:
        async with _service() as service:
            async with CallerHTTPServer(service, build_mcp_server(service), port=0) as server:
                port_out.put(server.port)
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)

    asyncio.run(main())


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _service_only(n: int) -> float:
    async with _service() as service:
        client = service.registry.lookup(TOKEN)
        assert client is not None
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await service.chat(BODY, client)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


async def _http(port: int, n: int) -> dict[str, float]:
    import aiohttp

    url = f"http://127.0.0.1:{port}"
    headers = {"x-llm-caller-token": TOKEN}
    out: dict[str, float] = {}
    async with aiohttp.ClientSession(headers=headers,
                                     connector=aiohttp.TCPConnector(limit=64)) as http:
        for _ in range(50):  # warm-up
            async with http.post(f"{url}/mcp/chat", json=BODY) as resp:
                await resp.read()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            async with http.post(f"{url}/mcp/chat", json=BODY) as resp:
                await resp.read()
                assert resp.status == 200
            times.append(time.perf_counter() - t0)
        out["http_chat_p50_ms"] = _pct(times, 0.5) * 1e3
        out["http_chat_p99_ms"] = _pct(times, 0.99) * 1e3

        async def worker(count: int) -> None:
            for _ in range(count):
                async with http.post(f"{url}/mcp/chat", json=BODY) as resp:
                    await resp.read()

        total, workers = n * 4, 32
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(total // workers) for _ in range(workers)))
        out["http_chat_rps"] = (total // workers) * workers / (time.perf_counter() - t0)

        ttfe = []
        for _ in range(max(50, n // 4)):
            t0 = time.perf_counter()
            async with http.post(f"{url}/mcp/chatStream", json=BODY) as resp:
                first = await resp.content.readuntil(b"\n\n")
                ttfe.append(time.perf_counter() - t0)
                assert first.startswith(b"data: ")
                await resp.read()
        out["sse_ttfe_p50_ms"] = _pct(ttfe, 0.5) * 1e3
        out["sse_ttfe_p99_ms"] = _pct(ttfe, 0.99) * 1e3
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    result: dict[str, Any] = {"adapter": "llm-caller", "requests": args.requests}
    result["service_p50_us"] = asyncio.run(_service_only(args.requests))
    ctx = multiprocessing.get_context("spawn")
    port_q, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(port_q, stop), name="caller-bench-server")
    proc.start()
    try:
        port = port_q.get(timeout=60)
        result.update(asyncio.run(_http(port, args.requests)))
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in result.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
