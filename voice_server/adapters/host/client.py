"""A Python client of the host protocol over any byte stream: TCP, a Unix socket, or the stdio
of a bridge process (the Hyperswarm bridge in ``connect`` mode).

Client rules as the original's: wait up to 15 s for ``server_info``; one
active request at a time; a prompt over 8192 UTF-8 bytes is refused locally; an inactivity
timer (30 s) runs from ``chat_start`` and restarts on each message; an ``error`` with the active
id, or with no id, ends the request; ``abort`` sends ``{type, request_id}`` without a payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..kit import AsyncService
from . import messages as m
from .codec import LineDecoder, encode
from .errors import HostError, LineTooLong
from .swarm import stop_process

__all__ = ["HostClient"]

_CLOSED: dict[str, Any] = {"type": "__closed__"}


async def _bridge_error(process: asyncio.subprocess.Process) -> HostError | None:
    """The last ``{"code", "message"}`` status line a failed bridge wrote to stderr."""
    if process.stderr is None:
        return None
    try:
        async with asyncio.timeout(2.0):
            await process.wait()
            text = await process.stderr.read()
    except TimeoutError:
        return None
    for line in reversed(text.decode("utf-8", "replace").splitlines()):
        with contextlib.suppress(ValueError, AttributeError):
            status = json.loads(line)
            if status.get("code"):
                return HostError(str(status.get("message", "")), code=str(status["code"]))
    return None


class HostClient(AsyncService):
    """``async with await HostClient.connect(port=P) as client: text = await client.ask("hi")``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 process: asyncio.subprocess.Process | None = None) -> None:
        self._reader = reader
        self._writer = writer
        self._process = process
        self._decoder = LineDecoder()
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reading = asyncio.create_task(self._read_loop(), name="host-client-reader")
        self.server_info: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.active_request: str | None = None

    # -- connecting ---------------------------------------------------------------------------
    @classmethod
    async def connect(cls, host: str = "127.0.0.1", port: int | None = None, *,
                      unix_path: str | os.PathLike[str] | None = None,
                      timeout_s: float = 15.0) -> HostClient:
        """Connect by TCP or Unix socket and wait for ``server_info``."""
        try:
            async with asyncio.timeout(timeout_s):
                if unix_path is not None:
                    reader, writer = await asyncio.open_unix_connection(os.fspath(unix_path))
                else:
                    reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise HostError(f"Cannot connect to the host: {exc}",
                            code=m.ErrorCode.CONNECT_FAILED) from exc
        client = cls(reader, writer)
        await client._handshake(timeout_s)
        return client

    @classmethod
    async def spawn(cls, argv: Sequence[str], *, timeout_s: float = 15.0,
                    env: dict[str, str] | None = None) -> HostClient:
        """Speak the protocol over a bridge process's stdin/stdout (e.g. the Hyperswarm one)."""
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env)
        assert process.stdout is not None and process.stdin is not None
        client = cls(process.stdout, process.stdin, process=process)  # type: ignore[arg-type]
        try:
            await client._handshake(timeout_s)
        except HostError as exc:
            reported = await _bridge_error(process)
            await client.aclose()
            raise reported or exc from None
        except BaseException:
            await client.aclose()
            raise
        return client

    async def _handshake(self, timeout_s: float) -> None:
        try:
            message = await self.receive(timeout_s)
        except TimeoutError:
            await self.aclose()
            raise HostError(f"No server_info received within {timeout_s:g} seconds",
                            code=m.ErrorCode.TIMEOUT_NO_RESPONSE) from None
        if message.get("type") == "error":
            await self.aclose()
            payload = message.get("payload") or {}
            raise HostError(str(payload.get("message", "connection refused")),
                            code=str(payload.get("code", m.ErrorCode.CONNECT_FAILED)))
        if message.get("type") != "server_info":
            await self.aclose()
            raise HostError("the host did not start with server_info",
                            code=m.ErrorCode.BAD_MESSAGE)
        self.server_info = message["payload"]

    # -- raw messages -------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        try:
            while data := await self._reader.read(65536):
                for value in self._decoder.feed(data):
                    if isinstance(value, dict):
                        self._queue.put_nowait(value)
        except (ConnectionError, LineTooLong):
            pass
        finally:
            self._queue.put_nowait(_CLOSED)

    async def send(self, message: dict[str, Any]) -> None:
        try:
            self._writer.write(encode(message))
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise HostError("Host disconnected", code=m.ErrorCode.HOST_DISCONNECTED) from exc

    async def receive(self, timeout_s: float | None = 30.0) -> dict[str, Any]:
        """The next message; ``HostError(HOST_DISCONNECTED)`` once the stream has ended."""
        async with asyncio.timeout(timeout_s):
            message = await self._queue.get()
        if message is _CLOSED:
            self._queue.put_nowait(_CLOSED)  # stay closed for later calls
            raise HostError("Host disconnected", code=m.ErrorCode.HOST_DISCONNECTED)
        return message

    # -- chat ---------------------------------------------------------------------------------
    async def chat(self, prompt: str, *, request_id: str | None = None,
                   timeout_s: float = m.CLIENT_TIMEOUT_S) -> AsyncIterator[str]:
        """Stream one answer's text pieces; ``finish_reason`` is set when it ends."""
        if len(prompt.encode("utf-8", "surrogatepass")) > m.MAX_PROMPT_BYTES:
            raise HostError("Prompt exceeds maximum size of 8 KB", code=m.ErrorCode.BAD_MESSAGE)
        if self.active_request is not None:
            raise HostError("a request is already active", code=m.ErrorCode.MODEL_BUSY)
        rid = request_id or f"req-{uuid.uuid4()}"
        self.active_request, self.finish_reason = rid, None
        try:
            await self.send(m.chat_start(rid, prompt))
            while True:
                try:
                    message = await self.receive(timeout_s)
                except TimeoutError:
                    raise HostError(f"No response from host for {timeout_s:g} seconds",
                                    code=m.ErrorCode.TIMEOUT_NO_RESPONSE,
                                    request_id=rid) from None
                kind, mid = message.get("type"), message.get("request_id")
                payload = message.get("payload") or {}
                if kind == "chat_chunk" and mid == rid:
                    yield str(payload.get("text", ""))
                elif kind == "chat_end" and mid == rid:
                    self.finish_reason = str(payload.get("finish_reason", "stop"))
                    return
                elif kind == "error" and mid in (rid, None):
                    raise HostError(str(payload.get("message", "")),
                                    code=str(payload.get("code", "")), request_id=mid)
        finally:
            self.active_request = None

    async def ask(self, prompt: str, **kw: Any) -> str:
        """The whole answer to one prompt."""
        return "".join([piece async for piece in self.chat(prompt, **kw)])

    async def abort(self) -> None:
        """Ask the host to stop the active request (it answers ``chat_end{abort}``)."""
        if self.active_request is not None:
            await self.send(m.abort(self.active_request))

    # -- lifecycle ----------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the stream (and the bridge process); safe to call twice."""
        self._writer.close()
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reading
        if self._process is not None:
            await stop_process(self._process)
