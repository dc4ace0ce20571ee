"""WebRTC media for one connection with aiortc (spec: "Transport Channels").

Signaling is non-trickle: ``offer`` -> ``signal{answer}`` once candidates are gathered; a second
offer on an open connection (the reference client re-offers when its mic starts) is answered on
the same ``RTCPeerConnection``. Inbound audio is resampled to 16 kHz mono and fed to a streaming
VAD, whose finished utterances go to the session's ``Conversation``; confirmed speech while the
agent talks is a barge-in (``Conversation.interrupt``). Outbound audio is one paced track per
session. Payload messages are mirrored to the data channel; client messages arriving on it are
handled like WebSocket ones. What it needs from its connection is declared by ``Signaling``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from ..compat import restrict_ice_host_addresses, set_audio_jitter_prefetch
from ..metrics import TurnRecord
from ..pipeline.audio import STT_RATE, Resampler
from ..pipeline.vad import StreamingVAD, VADSettings
from ..protocol import (
    ErrorCode,
    Message,
    ProtocolError,
    SessionDescription,
    Signal,
    SpeechEnd,
    SpeechStart,
    Transcript,
)
from .ice_policy import CandidatePolicy, filter_offer_candidates
from .rtc_audio import HeldOutput, OutboundAudioTrack, RtcSpeechOutput

if TYPE_CHECKING:
    from ..config import Settings
    from .conversation import Conversation, Transcriber


class Signaling(Protocol):
    """What WebRTC media needs from the connection that negotiated it."""

    conversation: Conversation | None
    rtc: Any

    async def send(self, message: Message) -> None: ...

    async def handle_raw(self, raw: str | bytes) -> None: ...

__all__ = ["RtcPeer", "rtc_factory"]

log = logging.getLogger(__name__)

INTERIM_AFTER_S = 1.5
INTERIM_EVERY_S = 1.0


def _reason(exc: Exception) -> str:
    """An exception as a short sentence for the client (aiortc's parser fails on garbage with
    bare IndexError or KeyError, whose text alone says nothing)."""
    text = str(exc).strip()
    if isinstance(exc, ValueError) and text:
        return text[:200]
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _ice_servers(config: list[dict[str, Any]]) -> list[RTCIceServer]:
    servers = []
    for entry in config:
        servers.append(RTCIceServer(urls=entry["urls"], username=entry.get("username"),
                                    credential=entry.get("credential")))
    return servers


class RtcPeer:
    def __init__(self, conn: Signaling, *, settings: Settings, stt: Transcriber,
                 busy: Callable[[], bool], policy: CandidatePolicy) -> None:
        self._conn = conn
        self._settings = settings
        self._stt = stt
        self._busy = busy  # the compute pool is saturated: skip best-effort work
        self._policy = policy
        self._host_addresses = settings.ice_host_addresses
        self.pc = RTCPeerConnection(RTCConfiguration(
            iceServers=_ice_servers(settings.ice_servers)))
        self.outbound = OutboundAudioTrack()
        self._outbound_added = False
        self.channel: Any = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._interim: asyncio.Task[None] | None = None
        self._closed = False
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("track", self._on_track)

    # ---- signaling -----------------------------------------------------------------------
    async def handle_offer(self, signal: SessionDescription) -> None:
        if signal.type != "offer":
            raise ProtocolError(ErrorCode.INVALID_MESSAGE, "offer.signal.type must be 'offer'")
        async with self._lock:
            try:
                sdp, refused = filter_offer_candidates(signal.sdp, self._policy)
                if refused:
                    log.info("ICE candidates not used (%d): %s", len(refused),
                             "; ".join(refused[:5]))
                offer = RTCSessionDescription(sdp=sdp, type="offer")
                await self.pc.setRemoteDescription(offer)
            except Exception as exc:  # the offer's content: the client's mistake
                log.info("WebRTC offer refused: %s: %s", type(exc).__name__, exc)
                raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                    f"the offer's SDP was refused: {_reason(exc)}") from None
            try:
                set_audio_jitter_prefetch(self.pc, self._settings.rtc_jitter_prefetch_frames)
                self._attach_outbound()
                if self._host_addresses:
                    restrict_ice_host_addresses(self.pc, self._host_addresses)
                answer = await self.pc.createAnswer()
                await self.pc.setLocalDescription(answer)
            except Exception as exc:
                log.warning("WebRTC negotiation failed: %s: %s", type(exc).__name__, exc)
                raise ProtocolError(ErrorCode.CONNECTION_FAILED,
                                    f"WebRTC negotiation failed: {_reason(exc)}") from None
            local = self.pc.localDescription
            await self._conn.send(Signal(signal=SessionDescription(type=local.type,
                                                                   sdp=local.sdp)))

    def _attach_outbound(self) -> None:
        if self._outbound_added:
            return
        for transceiver in self.pc.getTransceivers():
            if transceiver.kind == "audio" and transceiver.sender.track is None:
                self.pc.addTrack(self.outbound)
                self._outbound_added = True
                return

    # ---- data channel ----------------------------------------------------------------------
    def _on_datachannel(self, channel: Any) -> None:
        self.channel = channel

        @channel.on("message")
        def on_message(data: str | bytes) -> None:
            self._spawn(self._handle_data(data), "datachannel-message")

    async def _handle_data(self, data: str | bytes) -> None:
        """The same path as a WebSocket message: one rate limit, one size limit, one idle
        clock for both."""
        await self._conn.handle_raw(data)

    def speech_output(self) -> RtcSpeechOutput | None:
        """Where a turn not started by voice (typed) is spoken: the outbound track, once the
        client receives it."""
        if not self._outbound_added or self.pc.connectionState != "connected":
            return None
        return RtcSpeechOutput(self.outbound, self._conn.send)

    def send_data(self, text: str) -> None:
        channel = self.channel
        if channel is not None and channel.readyState == "open":
            try:
                channel.send(text)
            except Exception as exc:  # a closing channel must not break the WebSocket path
                log.debug("data channel send failed: %s", exc)

    # ---- inbound audio -----------------------------------------------------------------------
    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            self._spawn(self._listen(track), "inbound-audio")

    def vad_settings(self) -> VADSettings:
        """Server defaults, overridden by the current playbook stage's ``turn_taking``."""
        s = self._settings
        values = {"aggressiveness": s.vad_aggressiveness, "min_speech_ms": s.vad_min_speech_ms,
                  "end_silence_ms": s.vad_end_silence_ms, "pre_roll_ms": s.vad_pre_roll_ms}
        if (conversation := self._conn.conversation) is not None:
            overrides = conversation.turn_taking()
            values.update({k: v for k, v in overrides.items() if k in values and v is not None})
        return VADSettings(max_utterance_s=s.max_audio_seconds, duck_ms=s.vad_duck_ms,
                           barge_in_min_speech_ms=s.vad_barge_in_min_speech_ms,
                           spec_silence_ms=s.vad_spec_silence_ms, **values)

    @property
    def _conversation(self) -> Conversation:
        conversation = self._conn.conversation
        assert conversation is not None  # an offer is handled once the session exists
        return conversation

    def _record(self) -> TurnRecord:
        session = self._conversation.session
        return TurnRecord(session_id=session.id if session is not None else "?")

    async def _listen(self, track: Any) -> None:
        vad = StreamingVAD(self.vad_settings())
        resampler = Resampler(STT_RATE)
        record: TurnRecord | None = None
        last_interim = 0.0
        held: _Speculation | None = None  # an answer started on a short pause, not yet heard
        try:
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                pcm = resampler.push_frame(frame)
                vad.agent_speaking = self._conversation.agent_speaking
                for event in vad.feed(pcm):
                    if event.kind == "duck":
                        self._duck()
                    elif event.kind == "reject":
                        self.outbound.resume()  # a click or cough: carry on talking
                    elif event.kind == "pause":
                        held = await self._abandon(held)
                        held = await self._speculate(event.pcm)
                    elif event.kind == "resume":
                        held = await self._abandon(held)  # the user spoke on: drop it unheard
                    elif event.kind == "start":
                        held = await self._abandon(held)
                        record = await self._speech_started()
                        self.outbound.resume()
                        last_interim = time.monotonic()
                    else:
                        if held is not None and np.array_equal(held.pcm, event.pcm):
                            await self._confirm(held)
                            held = None
                        else:
                            held = await self._abandon(held)
                            await self._speech_ended(event.pcm, record)
                        record = None
                        if (wanted := self.vad_settings()) != vad.settings:  # stage changed
                            vad = StreamingVAD(wanted)
                            self.outbound.resume()
                if (vad.speaking and held is None  # a paused user has a transcript coming
                        and self._settings.interim_transcripts
                        and not self._busy()  # best effort: shed under load
                        and vad.time_s and time.monotonic() - last_interim >= INTERIM_EVERY_S
                        and len(vad.utterance_so_far()) >= INTERIM_AFTER_S * STT_RATE
                        and (self._interim is None or self._interim.done())):
                    last_interim = time.monotonic()
                    self._interim = self._spawn(
                        self._interim_transcript(vad.utterance_so_far()), "interim-transcript")
        finally:
            if held is not None:
                held.output.discard()

    async def _speculate(self, pcm: np.ndarray) -> _Speculation:
        """Speculative end of turn: answer the utterance so far now, holding its messages and
        audio until the full end-of-speech silence confirms it."""
        send = self._conn.send
        output = HeldOutput(RtcSpeechOutput(self.outbound, send), send)
        transcript = self._spawn(self._stt.transcribe(pcm), "speculative-stt")
        record = self._record()
        await self._conversation.start_utterance(pcm, output, record, transcript,
                                                 emit=output.emit)
        return _Speculation(pcm, output, record)

    async def _confirm(self, held: _Speculation) -> None:
        if self._interim is not None and not self._interim.done():
            self._interim.cancel()
        await self._conn.send(SpeechEnd())
        held.record.speech_end = held.record.started = time.monotonic()
        held.record.speculative_stt = True
        await held.output.commit()

    async def _abandon(self, held: _Speculation | None) -> None:
        if held is not None:
            held.output.discard()
            await self._conversation.interrupt()  # the held answer is the current job
        return None

    def _duck(self) -> None:
        """A voiced run started while the agent talks: silence the agent until the candidate is
        confirmed (barge-in, cancels the turn) or rejected (resume where it paused)."""
        turn = self._conversation.interruptible_turn()
        if turn is None or not self.outbound.busy:
            return
        self.outbound.pause()
        if turn.record.ducked is None:
            turn.record.ducked = time.monotonic()

    async def _speech_started(self) -> TurnRecord:
        await self._conn.send(SpeechStart())
        record = self._record()
        if (turn := self._conversation.interruptible_turn()) is not None:  # barge in
            turn.record.barge_in_detected = time.monotonic()
            await self._conversation.interrupt()
        return record

    async def _speech_ended(self, pcm: Any, record: TurnRecord | None) -> None:
        if self._interim is not None and not self._interim.done():
            self._interim.cancel()
        await self._conn.send(SpeechEnd())
        record = record or self._record()
        record.speech_end = time.monotonic()
        record.started = record.speech_end
        await self._conversation.start_utterance(
            pcm, RtcSpeechOutput(self.outbound, self._conn.send), record)

    async def _interim_transcript(self, pcm: Any) -> None:
        text = await self._stt.transcribe(pcm, urgent=False)
        if text.strip() and self._conn.rtc is self:
            await self._conn.send(Transcript(text=text, is_final=False))

    # ---- lifecycle -------------------------------------------------------------------------
    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=f"rtc-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.outbound.flush()
        self.outbound.stop()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.pc.close()


@dataclass
class _Speculation:
    pcm: np.ndarray  # the utterance as it was at the pause (``end`` must carry the same)
    output: HeldOutput
    record: TurnRecord


def rtc_factory(settings: Settings, stt: Transcriber,
                busy: Callable[[], bool]) -> Callable[[Signaling], RtcPeer]:
    """The per-connection WebRTC constructor the server uses for ``offer`` messages."""
    policy = CandidatePolicy.from_lists(settings.ice_candidate_allow,
                                        settings.ice_candidate_deny,
                                        settings.ice_candidate_min_port)

    def make(conn: Signaling) -> RtcPeer:
        return RtcPeer(conn, settings=settings, stt=stt, busy=busy, policy=policy)

    return make
