"""The NDJSON host: serves the ``llm/`` layer over any byte stream (TCP, Unix socket, a bridge).

Behaviour follows the spec's requirements and, where it is silent, the reference relay that
existing clients were written against: ``server_info`` on connect (``busy`` while the gate is
full); ``chat_start`` streams ``chat_chunk``s then ``chat_end{stop}``; ``abort`` of this
connection's active request cancels it and answers ``chat_end{abort}`` (anything else: no
reply); failures are one ``error`` with the request id instead of a ``chat_end``; a disconnect
cancels the generation silently.

``run_sidecar`` serves the host as one unit, on TCP and/or a Unix socket and optionally announced
on Hyperswarm, for ``voice-server sidecar host`` and ``adapters.launch`` (sidecars started beside
the voice server from config).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import Field

from ...config import Settings
from ...llm import ChatRequest, LLMError, LLMRouter
from ..kit import StreamServer, StrictModel, with_defaults
from ..wire_json import has_lone_surrogate
from . import messages as m
from .codec import MAX_LINE_BYTES, LineDecoder, encode
from .errors import LineTooLong, ProtocolViolation

__all__ = ["HostOptions", "HostServer", "HostSidecarConfig", "map_generation_error", "run_sidecar"]

log = logging.getLogger(__name__)


class HostOptions(StrictModel):
    """Adapter options: identity, limits (spec defaults) and sampling."""

    host_name: str = Field(default_factory=socket.gethostname)
    model: str | None = Field(None, description="LLM-layer model spec (None: the default)")
    max_clients: int = Field(m.MAX_CLIENTS, ge=1)
    concurrency: int = Field(1, ge=1, description="generations at once across all clients")
    no_chunk_timeout_s: float = Field(m.CLIENT_TIMEOUT_S, gt=0)
    max_prompt_bytes: int = Field(m.MAX_PROMPT_BYTES, ge=1)
    max_line_bytes: int = Field(MAX_LINE_BYTES, ge=1024)
    write_timeout_s: float = Field(5.0, gt=0)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    system_prompt: str | None = None


def map_generation_error(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """``(code, message)`` for a failed generation, mapped from the LLM layer's error kinds
    onto the spec's codes; unknown exceptions never leak their text."""
    if not isinstance(exc, LLMError | TimeoutError):
        return m.ErrorCode.GENERATION_FAILED, "Unknown error during generation"
    kind = exc.kind if isinstance(exc, LLMError) else "timeout"
    if kind == "timeout":
        return m.ErrorCode.TIMEOUT_NO_RESPONSE, \
            f"No response from model for {timeout_s:g} seconds"
    if kind == "model_not_found":
        return m.ErrorCode.OLLAMA_MODEL_NOT_AVAILABLE, f"Model not available: {exc}"
    if kind == "unavailable":
        if getattr(exc, "status", None) is None:  # no answer at all: the model is not running
            return m.ErrorCode.OLLAMA_NOT_FOUND, "Cannot connect to the model (not running?)"
        return m.ErrorCode.GENERATION_FAILED, f"Model server error: {exc}"
    if kind in ("bad_request", "auth", "rate_limited"):
        return m.ErrorCode.GENERATION_FAILED, f"Invalid request: {exc}"
    return m.ErrorCode.GENERATION_FAILED, str(exc) or "Unknown error during generation"


class _Connection:
    """One peer: a read loop plus at most one generation task."""

    def __init__(self, host: HostServer, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.host = host
        self.options = host.options
        self.reader = reader
        self.writer = writer
        self.active: tuple[str, asyncio.Task[None]] | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False

    async def send(self, message: dict[str, Any]) -> None:
        """Every write goes through here: one at a time, drained, with a deadline."""
        if self._closed:
            raise ConnectionResetError("connection closed")
        async with self._send_lock:
            self.writer.write(encode(message))
            try:
                async with asyncio.timeout(self.options.write_timeout_s):
                    await self.writer.drain()
            except TimeoutError:
                self._closed = True
                self.writer.transport.abort()
                raise ConnectionResetError("peer did not read within the write timeout") \
                    from None

    async def run(self) -> None:
        try:
            await self.send(m.server_info(self.options.host_name, self.host.model_name,
                                          "busy" if self.host.busy else "ready"))
            decoder = LineDecoder(max_line_bytes=self.options.max_line_bytes)
            while data := await self.reader.read(65536):
                for value in decoder.feed(data):
                    await self.dispatch(value)
        except LineTooLong as exc:  # the stream cannot be resynchronised: answer and close
            await self.send(m.error(exc.code, exc.message))
        finally:  # a ConnectionError is logged by StreamServer.serve_stream
            self._closed = True
            await self.cancel_active()

    async def dispatch(self, value: Any) -> None:
        try:
            message = m.validate(value)
        except ProtocolViolation as exc:
            await self.send(m.error(exc.code, exc.message))
            return
        if message.type == "chat_start":
            await self.chat_start(message)
        elif message.type == "abort":
            await self.abort(message)
        else:
            log.debug("host ignores a %s message from a client", message.type)

    async def chat_start(self, message: m.Message) -> None:
        rid = message.request_id
        assert rid is not None  # validate() guarantees it for chat_start
        prompt = message.payload["prompt"]
        if has_lone_surrogate(prompt):  # a JSON escape can spell one; no model takes it
            await self.send(m.error(m.ErrorCode.BAD_MESSAGE, "Prompt is not valid Unicode "
                                    "(a lone surrogate)", rid))
            return
        if len(prompt.encode("utf-8", "surrogatepass")) > self.options.max_prompt_bytes:
            size = f"{self.options.max_prompt_bytes / 1024:g} KB"
            await self.send(m.error(m.ErrorCode.BAD_MESSAGE,
                                    f"Prompt exceeds maximum size of {size}", rid))
            return
        if self.active is not None or not self.host.try_acquire():
            await self.send(m.error(m.ErrorCode.MODEL_BUSY, "Host is processing another "
                                    "request", rid))
            return
        task = asyncio.create_task(self.generate(rid, prompt), name=f"host-generate-{rid}")
        self.active = (rid, task)
        self.host.generations.add(task)
        task.add_done_callback(self._generation_done)

    def _generation_done(self, task: asyncio.Task[None]) -> None:
        """The slot back, however the generation ended: also when an ``abort`` in the same
        read cancelled it before its first step (then no ``finally`` of it ever ran, and the
        host answered MODEL_BUSY to everyone until restarted)."""
        self.host.generations.discard(task)
        self.host.release()
        if self.active is not None and self.active[1] is task:
            self.active = None

    async def abort(self, message: m.Message) -> None:
        if self.active is None or self.active[0] != message.request_id:
            return  # unknown, finished or another connection's request: no reply
        task = self.active[1]
        await self.cancel_active()
        if task.cancelled():
            await self.send(m.chat_end(message.request_id, "abort"))

    async def cancel_active(self) -> None:
        if self.active is not None:
            task = self.active[1]
            task.cancel()
            await asyncio.wait([task])

    def _request(self, prompt: str) -> ChatRequest:
        messages = [{"role": "user", "content": prompt}]
        if self.options.system_prompt:
            messages.insert(0, {"role": "system", "content": self.options.system_prompt})
        return ChatRequest(messages=messages, model=self.options.model,
                           max_tokens=self.options.max_tokens,
                           temperature=self.options.temperature)

    async def generate(self, rid: str, prompt: str) -> None:
        timeout_s = self.options.no_chunk_timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s) as deadline:
                async with contextlib.aclosing(
                        self.host.router.stream(self._request(prompt))) as events:
                    async for event in events:
                        deadline.reschedule(loop.time() + timeout_s)
                        if event.text:
                            await self.send(m.chat_chunk(rid, event.text))
                        if event.done:
                            break
            await self.send(m.chat_end(rid, "stop"))
        except ConnectionError:
            pass
        except Exception as exc:
            if not isinstance(exc, LLMError | TimeoutError):
                log.exception("generation %s failed", rid)
            code, text = map_generation_error(exc, timeout_s)
            with contextlib.suppress(ConnectionError):
                await self.send(m.error(code, text, rid))


class HostServer(StreamServer):
    """``async with HostServer(router, options, port=0, unix_path=None) as host: host.port``."""

    name = "host"

    def __init__(self, router: LLMRouter, options: HostOptions | None = None, *,
                 host: str = "127.0.0.1", port: int | None = 0,
                 unix_path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(host=host, port=port, unix_path=unix_path)
        self.router = router
        self.options = options or HostOptions()
        self.model_name = router.resolve(self.options.model)[1]
        self.generations: set[asyncio.Task[None]] = set()
        self._active = 0

    clients = StreamServer.connections

    @property
    def busy(self) -> bool:
        return self._active >= self.options.concurrency

    def try_acquire(self) -> bool:
        """Take a generation slot if one is free (never waits: a full gate is MODEL_BUSY)."""
        if self.busy:
            return False
        self._active += 1
        return True

    def release(self) -> None:
        self._active -= 1

    async def admit(self, writer: asyncio.StreamWriter) -> bool:
        if self.clients < self.options.max_clients:
            return True
        writer.write(encode(m.error(m.ErrorCode.CONNECT_FAILED, "Max clients reached")))
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(self.options.write_timeout_s):
                await writer.drain()
        return False

    async def serve_peer(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        await _Connection(self, reader, writer).run()


class HostSidecarConfig(StrictModel):
    """Where the host listens, its Hyperswarm announcement, and its adapter options."""

    host: str = "127.0.0.1"
    port: int | None = Field(0, ge=0, le=65535, description="TCP port (0: a free one; "
                                                            "None: no TCP)")
    unix_path: str | None = None
    swarm_key: str | None = Field(None, description="announce on Hyperswarm under this key")
    swarm_bootstrap: str | None = None
    swarm_direct: bool = False
    options: HostOptions = Field(default_factory=HostOptions)


@contextlib.asynccontextmanager
async def run_sidecar(router: LLMRouter, config: HostSidecarConfig | Mapping[str, Any],
                      settings: Settings) -> AsyncIterator[dict[str, str]]:
    """Serve until the block exits; yields ``model`` and the addresses."""
    config = HostSidecarConfig.model_validate(config)
    options = with_defaults(config.options, temperature=settings.llm_temperature)
    async with contextlib.AsyncExitStack() as stack:
        server = await stack.enter_async_context(HostServer(
            router, options, host=config.host, port=config.port,
            unix_path=config.unix_path))
        ready = {"model": server.model_name}
        if server.port is not None:
            ready["tcp"] = f"{config.host}:{server.port}"
        if config.unix_path:
            ready["unix"] = config.unix_path
        if config.swarm_key:
            from .swarm import SwarmAnnouncer

            tcp = (config.host, server.port) if server.port is not None else None
            announcer = await stack.enter_async_context(SwarmAnnouncer(
                config.swarm_key, tcp=tcp, unix_path=None if tcp else config.unix_path,
                bootstrap=config.swarm_bootstrap, direct=config.swarm_direct))
            ready["server_id"] = announcer.server_id or ""
        yield ready
