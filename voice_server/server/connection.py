"""One WebSocket connection speaking llmrtc v1 (spec: "Connection Lifecycle").

Sends ``ready`` at once; answers ``ping``; recovers sessions on ``reconnect``; runs utterances
(``audio`` messages, or VAD segments from WebRTC) through STT and a ``Turn``; closes after
``idle_timeout_s`` without a message. Malformed input gets ``error{INVALID_MESSAGE}`` and the
connection stays open; unknown message types are logged and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
from websockets.exceptions import ConnectionClosed

from ..metrics import TurnRecord, session_tag
from ..pipeline.audio import AudioFormatError, decode_base64_wav
from ..pipeline.speech import ChunkMessageOutput, SpeechOutput
from ..pipeline.stt import STTError
from ..pipeline.turn import Turn, TurnContext
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
    Transcript,
    UnknownMessage,
    VisionAttachment,
    encode,
    parse_client,
)
from .auth import AuthError, Principal, auth_message_token, query_token
from .limits import TokenBucket, client_address
from .sessions import Session

if TYPE_CHECKING:
    from websockets.asyncio.server import ServerConnection

    from .app import VoiceServer

__all__ = ["Connection"]

log = logging.getLogger(__name__)

# Payload messages also go to the data channel (spec: "Transport Channels").
SIGNALING_TYPES = {"ready", "pong", "signal", "reconnect-ack"}
_BUSY = ("the server holds as much client input as its memory budget allows ({} MiB); "
         "message dropped, try again in a moment")


class Connection:
    def __init__(self, ws: ServerConnection, server: VoiceServer) -> None:
        self.ws = ws
        self.server = server
        self.settings = server.settings
        self.session: Session | None = None
        self.rtc: Any = None  # RtcPeer once an offer arrived
        self._attachments: list[VisionAttachment] = []
        self._attachment_bytes = 0  # their size, counted in the server's input budget
        self._job: asyncio.Task[None] | None = None
        self._turn: Turn | None = None
        self._closed = False
        self._send_lock = asyncio.Lock()
        self.principal: Principal | None = None
        self._bucket = TokenBucket(self.settings.max_messages_per_s, self.settings.message_burst)
        self._last_message_at = time.monotonic()  # either path (the idle clock)
        self._limited_notice_at = -1.0

    # ---- sending: one place, both channels ------------------------------------------------
    async def send(self, message: Message) -> None:
        text = encode(message)
        if isinstance(message, Error):
            self.server.metrics.errors.labels(message.code.value).inc()
        async with self._send_lock:
            try:
                async with asyncio.timeout(self.settings.send_timeout_s):
                    await self.ws.send(text)
            except ConnectionClosed:
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
        request = getattr(self.ws, "request", None)
        query = parse_qs(urlsplit(request.path).query) if request is not None else {}
        values = query.get("playbook")
        return values[0] if values else self.settings.default_playbook

    def _remote_ip(self) -> str:
        address = getattr(self.ws, "remote_address", None)
        peer = str(address[0]) if address else "?"
        request = getattr(self.ws, "request", None)
        forwarded = request.headers.get("X-Forwarded-For") if request is not None else None
        return client_address(peer, forwarded, self.server.trusted_proxies)

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
        """A token from ``?token=`` or a first ``{"type": "auth"}`` message (issue 9)."""
        assert self.server.signer is not None
        request = getattr(self.ws, "request", None)
        token = query_token(request.path) if request is not None else None
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
        except ConnectionClosed:
            return False
        await self.send_error(ErrorCode.CONNECTION_FAILED, f"unauthorized: {reason}")
        await self.ws.close(4401, "unauthorized")
        return False

    async def _serve(self) -> None:
        self.session = await self.server.sessions.create()
        if self.principal is not None:
            self.session.meta["principal"] = self.principal.subject
        self.server.attach(self.session.id, self)
        await self.send(Ready(id=self.session.id, protocol_version=1,
                              ice_servers=self.server.ice_servers_for(self.session.id)))
        playbook = self._requested_playbook()
        if playbook:
            if self.server.playbook_known(playbook):
                self.session.meta["playbook"] = playbook
            else:
                await self.send_error(ErrorCode.PLAYBOOK_ERROR,
                                      f"unknown playbook {playbook!r}; using plain chat")
        try:
            while True:
                try:
                    async with asyncio.timeout(self.settings.idle_timeout_s):
                        raw = await self.ws.recv()
                except TimeoutError:
                    if self._job is not None and not self._job.done():
                        continue  # the client waits for our answer: not idle
                    if time.monotonic() - self._last_message_at < self.settings.idle_timeout_s:
                        continue  # it spoke on the data channel meanwhile
                    log.info("closing idle connection (session %s)", session_tag(self.session.id))
                    await self.ws.close(1000, "idle timeout")
                    return
                except ConnectionClosed:
                    return
                await self.handle_raw(raw)
        finally:
            await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.interrupt()
        self._attachments.clear()
        self.server.input_budget.give_back(self._attachment_bytes)
        self._attachment_bytes = 0
        if self.rtc is not None:
            await self.rtc.close()
            self.rtc = None
        if self.session is not None:
            self.server.detach(self.session.id, self)
            await self.server.sessions.save(self.session)
            await self.server.sessions.release(self.session.id)

    @property
    def running_job(self) -> asyncio.Task[None] | None:
        """The utterance being answered, if any (graceful shutdown waits for it)."""
        return self._job if self._job is not None and not self._job.done() else None

    async def shutdown(self, code: int, reason: str) -> None:
        """Stop, persist and release the session, then close the socket with ``code``."""
        await self.close()
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
            await self.send_error(ErrorCode.RATE_LIMITED, _BUSY.format(budget.limit // 2**20))
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
                    self._queue_attachments(message.attachments)
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
            await self.interrupt()
            fresh = self.session
            self.server.detach(fresh.id, self)
            if not fresh.history:
                await self.server.sessions.delete(fresh.id)
            else:
                await self.server.sessions.save(fresh)
                await self.server.sessions.release(fresh.id)
            self.session = old
            await self.server.take_over(old.id, self)
        await self.send(ReconnectAck(success=True, session_id=old.id, history_recovered=True))

    def _queue_attachments(self, attachments: list[VisionAttachment]) -> None:
        """Hold images for the next turn, counted in the server's input budget until that
        turn ends (or the connection closes)."""
        added = sum(len(a.data) for a in attachments)
        if self._attachment_bytes + added > self.settings.max_attachment_bytes:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                f"attachments exceed {self.settings.max_attachment_bytes} bytes")
        budget = self.server.input_budget
        if not budget.take(added):
            raise ProtocolError(ErrorCode.RATE_LIMITED, _BUSY.format(budget.limit // 2**20))
        self._attachment_bytes += added
        self._attachments.extend(attachments)

    async def _on_audio(self, message: Audio) -> None:
        if message.attachments:
            self._queue_attachments(message.attachments)
        try:
            pcm = await self.server.pool.run(
                lambda: decode_base64_wav(message.data,
                                          max_seconds=self.settings.max_audio_seconds))
        except AudioFormatError as exc:
            await self.send_error(ErrorCode.INVALID_AUDIO_FORMAT, str(exc))
            return
        await self.start_utterance(pcm, ChunkMessageOutput(self.send))

    async def _on_offer(self, message: Offer) -> None:
        rtc_factory = self.server.rtc_factory
        if rtc_factory is None:
            await self.send_error(ErrorCode.WEBRTC_UNAVAILABLE,
                                  "WebRTC is not available on this server; use audio messages")
            return
        if self.rtc is None:
            self.rtc = rtc_factory(self)
        try:
            await self.rtc.handle_offer(message.signal)
        except ProtocolError:  # a failed negotiation leaves no peer, tracks or tasks behind
            rtc, self.rtc = self.rtc, None
            await rtc.close()
            raise

    # ---- utterances and turns ---------------------------------------------------------------
    async def interrupt(self) -> bool:
        """The one cancellation path: stop the running turn (and its STT) now."""
        cut = False
        if self._turn is not None and not self._turn.done:
            cut = await self._turn.cancel()
        job, self._job = self._job, None
        if job is not None and not job.done():
            if self._turn is None or self._turn.done:
                job.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job
        return cut

    @property
    def current_turn(self) -> Turn | None:
        return self._turn

    async def start_utterance(self, pcm: np.ndarray, output: SpeechOutput,
                              record: TurnRecord | None = None,
                              transcript: Awaitable[str] | None = None,
                              emit: Callable[[Message], Awaitable[None]] | None = None) -> None:
        """Supersede any running turn and answer this 16 kHz utterance. The WebRTC path's
        speculative end of turn passes ``transcript`` (speech-to-text already under way) and
        ``emit`` (holds messages until the end of turn is confirmed); an ``output`` whose
        ``discarded`` is true at the end was never heard and leaves no history."""
        await self.interrupt()
        assert self.session is not None
        record = record or TurnRecord(session_id=self.session.id)
        attachments, self._attachments = self._attachments, []
        held, self._attachment_bytes = self._attachment_bytes, 0
        self._job = asyncio.create_task(self._answer(pcm, output, record, attachments,
                                                     transcript, emit or self.send),
                                        name=f"utterance-{session_tag(self.session.id)}")
        if held:
            self._job.add_done_callback(lambda _: self.server.input_budget.give_back(held))

    async def _answer(self, pcm: np.ndarray, output: SpeechOutput, record: TurnRecord,
                      attachments: list[VisionAttachment],
                      transcript: Awaitable[str] | None = None,
                      emit: Callable[[Message], Awaitable[None]] | None = None) -> None:
        session = self.session
        assert session is not None
        send = emit or self.send
        try:
            text = await (transcript or self.server.stt.transcribe(pcm))
        except STTError as exc:
            record.error = "STT_ERROR"
            await self.send_error(ErrorCode.STT_ERROR, str(exc))
            self.server.metrics.record_turn(record)
            return
        record.stt_done = time.monotonic()
        record.transcript = text
        await send(Transcript(text=text, is_final=True))
        if not text.strip():
            return
        ctx = TurnContext(history=session.history, emit=send,
                          user_message=self.server.user_message(text, attachments),
                          state=session.state)
        turn = Turn(ctx=ctx, responder=self.server.responder_for(session), tts=self.server.tts,
                    output=output, record=record, chunker=self.server.new_chunker,
                    guard=self.server.new_guard)
        self._turn = turn
        turn.start()
        await turn.wait()
        if getattr(output, "discarded", False):  # a speculative answer the user resumed over
            return
        await self.server.sessions.append_history(session, turn.committed)
        await self.server.sessions.save(session)  # playbook state changed in place
        self.server.metrics.record_turn(record)
        self.server.last_turns.append(record)
