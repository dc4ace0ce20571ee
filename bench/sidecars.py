"""Adapter overhead of the broker and host sidecars against an instant model; prints JSON.

The server runs in a child process pinned to one CPU (when the machine has two or more) with
an in-process model that answers at once, so latency is the adapter's own cost: codec,
validation, routing, the event loop and loopback TCP. The load generator runs in this process
on another CPU with minimal raw-socket clients.

    python bench/sidecars.py [--requests 3000] [--clients 16]

Figures: ``p50_ms``/``p99_ms`` of sequential requests on one connection (and, for the broker,
with a new connection per request, as the origin's clients do), and ``rps`` with ``--clients``
concurrent connections. Targets (issue 6): p50 under 1 ms and at least 2,000 requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import statistics
import struct
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voice_server.llm import ChatRequest, ChatResult, LLMRouter, StreamEvent, Usage  # noqa: E402


class InstantProvider:
    """Answers every request at once: the adapter's cost is all that is measured."""

    name = "instant"
    default_model = "instant-model"
    supports_vision = False

    async def complete(self, request: ChatRequest) -> ChatResult:
        return ChatResult(text="ok", model=self.default_model, usage=Usage(1, 1))

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield StreamEvent(text="ok")
        yield StreamEvent(done=True, finish_reason="stop")

    async def embed(self, texts: list[str], *, model: str | None = None) -> list[list[float]]:
        return []

    async def list_models(self) -> list[str]:
        return [self.default_model]

    async def health(self) -> dict[str, Any]:
        return {"status": "ok"}

    async def aclose(self) -> None:
        return None


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu})


def _serve(kind: str, ports: Any, stop: Any, concurrency: int) -> None:
    """Child process: run one adapter on 127.0.0.1 until ``stop`` is set."""
    _pin(0)

    async def main() -> None:
        from voice_server.adapters.broker import BrokerProxy, BrokerServer, BrokerService
        from voice_server.adapters.host import HostOptions, HostServer

        router = LLMRouter({"instant": InstantProvider()}, default="instant")
        if kind == "host":
            server: Any = HostServer(router, HostOptions(concurrency=concurrency,
                                                         max_clients=concurrency + 4))
        elif kind == "broker_http":
            server = BrokerProxy(BrokerService(router))
        else:
            server = BrokerServer(BrokerService(router))
        async with server:
            ports.send(server.port)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, stop.wait)

    asyncio.run(main())


# -- load generators (raw sockets, as little client code as possible) --------------------------

def _frame(obj: dict[str, Any]) -> bytes:
    payload = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">I", len(payload)) + payload


async def _broker_exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           frame: bytes) -> None:
    writer.write(frame)
    await writer.drain()
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    body = await reader.readexactly(length)
    if b'"error":null' not in body[:40]:
        raise RuntimeError(f"unexpected broker answer: {body[:200]!r}")


async def _host_exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         line: bytes) -> None:
    writer.write(line)
    await writer.drain()
    while True:
        answer = await reader.readline()
        if b'"chat_end"' in answer:
            return
        if not answer or b'"error"' in answer[:20]:
            raise RuntimeError(f"unexpected host answer: {answer[:200]!r}")


def _stats(latencies: list[float]) -> dict[str, float]:
    latencies = sorted(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return {"requests": len(latencies), "p50_ms": round(statistics.median(latencies) * 1e3, 3),
            "p99_ms": round(p99 * 1e3, 3),
            "mean_ms": round(statistics.fmean(latencies) * 1e3, 3)}


async def _sequential(port: int, n: int, exchange: Callable[..., Awaitable[None]], data: bytes,
                      *, greeting: bool = False, per_connection: bool = False) -> dict[str, Any]:
    latencies = []
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if greeting:
        await reader.readline()  # server_info
    for _ in range(n):
        start = time.perf_counter()
        if per_connection:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await exchange(reader, writer, data)
        if per_connection:
            writer.close()
        latencies.append(time.perf_counter() - start)
    writer.close()
    return _stats(latencies)


async def _throughput(port: int, n: int, clients: int,
                      exchange: Callable[..., Awaitable[None]], data: bytes, *,
                      greeting: bool = False) -> dict[str, Any]:
    async def one_client(count: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if greeting:
            await reader.readline()
        for _ in range(count):
            await exchange(reader, writer, data)
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(one_client(n // clients) for _ in range(clients)))
    elapsed = time.perf_counter() - start
    done = (n // clients) * clients
    return {"clients": clients, "requests": done, "seconds": round(elapsed, 3),
            "rps": round(done / elapsed)}


def _http_request() -> bytes:
    body = json.dumps({"prompt": "hi", "correlation_id": "bench"}).encode()
    return (b"POST /llm_query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def _http_exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         data: bytes) -> None:
    writer.write(data)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head[:100])
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    await reader.readexactly(length)


async def _measure(kind: str, port: int, n: int, clients: int) -> dict[str, Any]:
    if kind == "broker_tcp":
        frame = _frame({"prompt": "hi", "correlation_id": "bench"})
        return {
            "sequential_one_connection": await _sequential(port, n, _broker_exchange, frame),
            "sequential_connection_per_request": await _sequential(
                port, n // 2, _broker_exchange, frame, per_connection=True),
            "throughput": await _throughput(port, n, clients, _broker_exchange, frame),
        }
    if kind == "broker_http":
        request = _http_request()
        return {"sequential_keep_alive": await _sequential(port, n, _http_exchange, request),
                "throughput": await _throughput(port, n, clients, _http_exchange, request)}
    line = b'{"type":"chat_start","request_id":"b","payload":{"prompt":"hi"}}\n'
    return {
        "host_concurrency": clients,  # the spec's default is 1; raised so clients can overlap
        "sequential_one_connection": await _sequential(port, n, _host_exchange, line,
                                                       greeting=True),
        "throughput": await _throughput(port, n, clients, _host_exchange, line, greeting=True),
    }


def run(kind: str, n: int, clients: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    stop = ctx.Event()
    proc = ctx.Process(target=_serve, args=(kind, child, stop, clients), daemon=True)
    proc.start()
    try:
        if not parent.poll(60):
            raise RuntimeError(f"{kind} server did not start")
        port = parent.recv()
        asyncio.run(_measure(kind, port, max(n // 10, 50), clients))  # warm-up
        return asyncio.run(_measure(kind, port, n, clients))
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--only", choices=["broker_tcp", "broker_http", "host"])
    args = parser.parse_args()
    _pin(1)
    kinds = [args.only] if args.only else ["broker_tcp", "broker_http", "host"]
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "server_pinned_to_one_cpu": (os.cpu_count() or 1) > 1,
                    "load_1min": round(os.getloadavg()[0], 2)},
        "targets": {"p50_ms_below": 1.0, "rps_at_least": 2000},
    }
    for kind in kinds:
        results[kind] = run(kind, args.requests, args.clients)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
