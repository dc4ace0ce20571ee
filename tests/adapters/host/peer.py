"""A raw NDJSON peer for host tests: bytes out, parsed lines in, with timeouts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from voice_server.adapters.host.codec import LineDecoder, encode

TIMEOUT = 10.0


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = LineDecoder(max_line_bytes=1 << 20)
        self.pending: list[Any] = []

    @classmethod
    async def open(cls, port: int | None = None, *, unix_path: str | None = None) -> Peer:
        if unix_path is not None:
            return cls(*await asyncio.open_unix_connection(unix_path))
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, message: dict[str, Any] | bytes) -> None:
        self.writer.write(message if isinstance(message, bytes) else encode(message))
        await self.writer.drain()

    async def recv(self, timeout_s: float = TIMEOUT) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while not self.pending:
                data = await self.reader.read(65536)
                if not data:
                    raise EOFError("host closed the connection")
                self.pending += self.decoder.feed(data)
        return self.pending.pop(0)

    async def recv_until(self, kind: str, timeout_s: float = TIMEOUT) -> list[dict[str, Any]]:
        """Messages up to and including the first of type ``kind``."""
        out = []
        while True:
            out.append(await self.recv(timeout_s))
            if out[-1]["type"] == kind:
                return out

    async def closed(self, timeout_s: float = TIMEOUT) -> bool:
        """True once the host has closed the connection (after any pending lines)."""
        try:
            while True:
                await self.recv(timeout_s)
        except EOFError:
            return True
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.writer.close()


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"
