"""One WebSocket connection speaking llmrtc v1 (spec: "Connection Lifecycle").

The WebSocket transport: admission, auth, the receive loop with its size, rate and idle
limits, and sending (mirrored to the WebRTC data channel). Sends ``ready`` at once; answers
``ping``; recovers sessions on ``reconnect``; hands ``audio`` messages to the session's
``Conversation`` and ``offer`` messages to WebRTC media (``rtc.RtcPeer``), which hands the
conversation its VAD segments. Malformed input gets ``error{INVALID_MESSAGE}`` and the
connection stays open; unknown message types are logged and ignored. What it needs from the
server is declared by ``ConnectionHost``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, urlsplit

from ..metrics import session_tag
from ..pipeline.audio import AudioFormatError, decode_base64_wav
from ..pipeline.speech import ChunkMessageOutput
from ..protocol import (
    Attachments,
    Audio,
    Error,
    ErrorCode,
    Message,
    Offer,
    Ping,
    Pong,
    ProtocolError,
    Ready,
    Reconnect,
    ReconnectAck,
    TurnMetricsSubscribe,
    UnknownMessage,
    UserText,
    encode,
    parse_client,
)
from .auth import AuthError, Principal, auth_message_token, query_token
from .conversation import BUSY, Conversation, ConversationServices
from .limits import TokenBucket, request_client
from .sessions import Session
from .websocket import ServerWebSocket, WebSocketClosed

if TYPE_CHECKING:
    import ipaddress

    from ..compute import ComputePool
    from ..config import Settings
    from ..metrics import Metrics
    from .auth import TokenSigner
    from .limits import Admission

__all__ = ["Connection"]

log = logging.getLogger(__name__)

# Payload messages also go to the data channel (spec: "Transport Channels").
SIGNALING_TYPES = {"ready", "pong", "signal", "reconnect-ack"}


class ConnectionHost(ConversationServices, Protocol):
    """What a WebSocket connection needs from the server that accepted it (besides what its
    conversation needs)."""

    settings: Settings
    admission: Admission
    signer: TokenSigner | None
    trusted_proxies: list[ipaddress.IPv4Network | ipaddress.IPv6Network]
    pool: ComputePool
    metrics: Metrics
    rtc_factory: Callable[[Connection], Any]

    def attach(self, session_id: str, conn: Connection) -> None: ...

    def detach(self, session_id: str, conn: Connection) -> None: ...

    async def take_over(self, session_id: str, conn: Connection) -> None: ...

    def ice_servers_for(self, session_id: str) -> list[dict[str, Any]]: ...

    def playbook_known(self, playbook_id: str) -> bool: ...


class Connection:
    def __init__(self, ws: ServerWebSocket, server: ConnectionHost) -> None:
        self.ws = ws
        self.server = server
        self.settings = server.settings
        self.conversation: Conversation | None = None  # once the session exists
        self.rtc: Any = None  # RtcPeer once an offer arrived
        self._closed = False
        self._send_lock = asyncio.Lock()
        self.principal: Principal | None = None
        self._bucket = TokenBucket(self.settings.max_messages_per_s, self.settings.message_burst)
        self._last_message_at = time.monotonic()  # either path (the idle clock)
        self._limited_notice_at = -1.0

    @property
    def session(self) -> Session | None:
        return self.conversation.session if self.conversation is not None else None

    @property
    def running_job(self) -> asyncio.Task[None] | None:
        """The utterance being answered, if any (graceful shutdown waits for it)."""
        return self.conversation.running_job if self.conversation is not None else None

    # ---- sending: one place, both channels ------------------------------------------------
    async def send(self, message: Message) -> None:
        text = encode(message)
        if isinstance(message, Error):
            self.server.metrics.errors.labels(message.code.value).inc()
        async with self._send_lock:
            try:
                async with asyncio.timeout(self.settings.send_timeout_s):
                    await self.ws.send(text)
            except WebSocketClosed:
                pass
            except TimeoutError:
                # a client that does not read cannot make us buffer without bound
                log.warning("client too slow to read for %.0f s: dropping the connection",
                            self.settings.send_timeout_s)
                self.server.metrics.errors.labels("SLOW_CLIENT").inc()
                self.ws.transport.abort()
            if self.rtc is not None and message.type not in SIGNALING_TYPES:
                self.rtc.send_data(text)

    async def send_error(self, code: ErrorCode, message: str) -> None:
        await self.send(Error(code=code, message=message))

    # ---- lifecycle ----------------------------------------------------------------------------
    def _requested_playbook(self) -> str | None:
        values = parse_qs(urlsplit(self.ws.path).query).get("playbook")
        return values[0] if values else self.settings.default_playbook

    def _remote_ip(self) -> str:
        return request_client(self.ws.remote_address, self.ws.headers,
                              self.server.trusted_proxies)

    async def run(self) -> None:
        """Admission (sessions per instance / per IP), auth when configured, then serve."""
        ip = self._remote_ip()
        refusal = self.server.admission.admit(ip)
        if refusal is not None:
            await self.send_error(ErrorCode.RATE_LIMITED, refusal)
            await self.ws.close(1013, "try again later")
            return
        try:
            if self.server.signer is None or await self._authenticate():
                await self._serve()
        finally:
            self.server.admission.release(ip)

    async def _authenticate(self) -> bool:
        """A token from ``?token=`` or a first ``{"type": "auth"}`` message (docs/deploy.md,
        ``AUTH_SECRET``)."""
        assert self.server.signer is not None
        token = query_token(self.ws.path)
        try:
            if token is None:
                async with asyncio.timeout(self.settings.auth_timeout_s):
                    token = auth_message_token(await self.ws.recv())
            self.principal = self.server.signer.verify(token)
            return True
        except AuthError as exc:
            reason = str(exc)
        except TimeoutError:
            reason = "no token presented in time"
        except WebSocketClosed:
            return False
        await self.send_error(ErrorCode.CONNECTION_FAILED, f"unauthorized: {reason}")
        await self.ws.close(4401, "unauthorized")
        return False

    async def _serve(self) -> None:
        session = await self.server.sessions.create()
        if self.principal is not None:
            session.meta["principal"] = self.principal.subject
        self.conversation = Conversation(self.server, session, self.send,
                                         max_attachment_bytes=self.settings.max_attachment_bytes)
        self.server.attach(session.id, self)
        await self.send(Ready(id=session.id, protocol_version=1,
                              ice_servers=self.server.ice_servers_for(session.id)))
        playbook = self._requested_playbook()
        if playbook:
            if self.server.playbook_known(playbook):
                session.meta["playbook"] = playbook
            else:
                await self.send_error(ErrorCode.PLAYBOOK_ERROR,
                                      f"unknown playbook {playbook!r}; using plain chat")
        try:
            while True:
                try:
                    async with asyncio.timeout(self.settings.idle_timeout_s):
                        raw = await self.ws.recv()
                except TimeoutError:
                    if self.running_job is not None:
                        continue  # the client waits for our answer: not idle
                    if time.monotonic() - self._last_message_at < self.settings.idle_timeout_s:
                        continue  # it spoke on the data channel meanwhile
                    log.info("closing idle connection (session %s)", session_tag(session.id))
                    await self.ws.close(1000, "idle timeout")
                    return
                except WebSocketClosed:
                    return
                await self.handle_raw(raw)
        finally:
            await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.conversation is not None:
            await self.conversation.close()
        if self.rtc is not None:
            await self.rtc.close()
            self.rtc = None
        if self.session is not None:
            self.server.detach(self.session.id, self)
            await self.server.sessions.save(self.session)
            await self.server.sessions.release(self.session.id)

    async def shutdown(self, code: int, reason: str) -> None:
        """Stop, persist and release the session, then close the socket with ``code``."""
        await self.close()
        await self.cut(code, reason)

    async def cut(self, code: int, reason: str) -> None:
        """Close the socket (another connection took the session over)."""
        await self.ws.close(code, reason)

    # ---- inbound --------------------------------------------------------------------------
    async def handle_raw(self, raw: str | bytes) -> None:
        """One client message, from the WebSocket or the WebRTC data channel."""
        self._last_message_at = time.monotonic()
        if not self._bucket.take():
            now = time.monotonic()
            if now - self._limited_notice_at >= 1.0:  # one notice a second, not one per message
                self._limited_notice_at = now
                await self.send_error(ErrorCode.RATE_LIMITED,
                                      f"more than {self.settings.max_messages_per_s:g} messages "
                                      "a second; message dropped")
            return
        if len(raw) > self.settings.max_message_bytes:
            await self.send_error(ErrorCode.INVALID_MESSAGE,
                                  f"message of {len(raw)} bytes exceeds the limit of "
                                  f"{self.settings.max_message_bytes} bytes (send audio as "
                                  "16 kHz mono WAV)")
            return
        budget = self.server.input_budget
        counted = len(raw) if len(raw) >= budget.counted_from else 0
        if counted and not budget.take(counted):
            await self.send_error(ErrorCode.RATE_LIMITED, BUSY.format(budget.limit // 2**20))
            return
        try:
            try:
                message = parse_client(raw)
            except ProtocolError as exc:
                await self.send_error(exc.code, str(exc))
                return
            del raw
            await self.handle(message)
        finally:
            budget.give_back(counted)

    async def handle(self, message: Message | UnknownMessage) -> None:
        """Dispatch one parsed client message (from the WebSocket or the data channel)."""
        try:
            match message:
                case Ping():
                    await self.send(Pong(timestamp=message.timestamp))
                case Reconnect():
                    await self._reconnect(message.session_id)
                case Audio():
                    await self._on_audio(message)
                case Attachments():
                    self._conversation().queue_attachments(message.attachments)
                case UserText():
                    await self._on_user_text(message)
                case TurnMetricsSubscribe():
                    self._conversation().report_turn_metrics = True
                case Offer():
                    await self._on_offer(message)
                case UnknownMessage():
                    log.info("ignoring unknown message type %r", message.type)
        except ProtocolError as exc:
            await self.send_error(exc.code, str(exc))
        except Exception:
            log.exception("failed to handle %s", getattr(message, "type", "?"))
            await self.send_error(ErrorCode.INTERNAL_ERROR, "the server failed to handle "
                                  "that message")

    async def _reconnect(self, session_id: str) -> None:
        assert self.session is not None
        store = self.server.sessions
        old = await store.get(session_id)
        if old is not None and self.server.signer is not None and (
                self.principal is None or old.meta.get("principal") != self.principal.subject):
            log.warning("refused resume of session %s by another principal",
                        session_tag(session_id))
            old = None  # another principal's session: answered exactly like an unknown id
        elif old is not None and old.id != self.session.id:
            old = await store.claim(session_id)  # the owning instance (if another) lets go
        if old is None:
            await self.send(ReconnectAck(success=False, session_id=self.session.id,
                                         history_recovered=False))
            return
        if old.id != self.session.id:
            conversation = self._conversation()
            await conversation.interrupt()
            fresh = self.session
            self.server.detach(fresh.id, self)
            if not fresh.history:
                await self.server.sessions.delete(fresh.id)
            else:
                await self.server.sessions.save(fresh)
                await self.server.sessions.release(fresh.id)
            conversation.session = old
            await self.server.take_over(old.id, self)
        await self.send(ReconnectAck(success=True, session_id=old.id, history_recovered=True))

    def _conversation(self) -> Conversation:
        assert self.conversation is not None  # messages are handled once the session exists
        return self.conversation

    async def _on_audio(self, message: Audio) -> None:
        conversation = self._conversation()
        if message.attachments:
            conversation.queue_attachments(message.attachments)
        try:
            pcm = await self.server.pool.run(
                lambda: decode_base64_wav(message.data,
                                          max_seconds=self.settings.max_audio_seconds))
        except AudioFormatError as exc:
            await self.send_error(ErrorCode.INVALID_AUDIO_FORMAT, str(exc))
            return
        await conversation.start_utterance(pcm, ChunkMessageOutput(self.send))

    async def _on_user_text(self, message: UserText) -> None:
        """Spoken on the WebRTC track when there is one, else as ``tts-chunk`` messages."""
        speech = self.rtc.speech_output() if self.rtc is not None else None
        await self._conversation().start_typed(message.text,
                                               speech or ChunkMessageOutput(self.send))

    async def _on_offer(self, message: Offer) -> None:
        if self.rtc is None:
            self.rtc = self.server.rtc_factory(self)
        try:
            await self.rtc.handle_offer(message.signal)
        except ProtocolError:  # a failed negotiation leaves no peer, tracks or tasks behind
            rtc, self.rtc = self.rtc, None
            await rtc.close()
            raise
