"""WebRTC media for one connection with aiortc (spec: "Transport Channels").

Signaling is non-trickle: ``offer`` -> ``signal{answer}`` once candidates are gathered; a second
offer on an open connection (the reference client re-offers when its mic starts) is answered on
the same ``RTCPeerConnection``. Inbound audio is resampled to 16 kHz mono and fed to a streaming
turn-taking (listening.py), which hands finished utterances and barge-ins to the session's
``Conversation``. Outbound audio is one paced track per
session. Payload messages are mirrored to the data channel; client messages arriving on it are
handled like WebSocket ones. What it needs from its connection is declared by ``Signaling``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from ..compat import restrict_ice_host_addresses, set_audio_jitter_prefetch
from ..pipeline.arrival import ArrivalClock
from ..pipeline.audio import STT_RATE, Resampler
from ..protocol import (
    ErrorCode,
    Message,
    ProtocolError,
    SessionDescription,
    Signal,
)
from .ice_policy import CandidatePolicy, filter_offer_candidates
from .listening import Listener, TurnModel
from .playout import PlayoutSpeechOutput
from .rtc_audio import OutboundAudioTrack
from .speech_gate import SpeechModel

if TYPE_CHECKING:
    from ..config import Settings
    from ..metrics import Metrics
    from .conversation import Conversation, Transcriber


class Signaling(Protocol):
    """What WebRTC media needs from the connection that negotiated it."""

    conversation: Conversation | None
    rtc: Any

    async def send(self, message: Message) -> None: ...

    async def handle_raw(self, raw: str | bytes) -> None: ...

__all__ = ["RtcPeer", "rtc_factory"]

log = logging.getLogger(__name__)


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
                 busy: Callable[[], bool], policy: CandidatePolicy,
                 turn_model: TurnModel | None = None, speech_model: SpeechModel | None = None,
                 llm_shares_cpu: bool = False, metrics: Metrics | None = None) -> None:
        self._conn = conn
        self._metrics = metrics
        self._settings = settings
        self._stt = stt
        self._busy = busy  # the compute pool is saturated: skip best-effort work
        self._policy = policy
        self._turn_model = turn_model
        self._speech_model = speech_model
        self._llm_shares_cpu = llm_shares_cpu
        self._host_addresses = settings.ice_host_addresses
        self.pc = RTCPeerConnection(RTCConfiguration(
            iceServers=_ice_servers(settings.ice_servers)))
        self.outbound = OutboundAudioTrack()
        self._outbound_added = False
        self.channel: Any = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
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

    def speech_output(self) -> PlayoutSpeechOutput | None:
        """Where a turn not started by voice (typed) is spoken: the outbound track, once the
        client receives it."""
        if not self._outbound_added or self.pc.connectionState != "connected":
            return None
        return PlayoutSpeechOutput(self.outbound, self._conn.send)

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

    def _conversation(self) -> Conversation:
        conversation = self._conn.conversation
        assert conversation is not None  # an offer is handled once the session exists
        return conversation

    async def _listen(self, track: Any) -> None:
        """Inbound audio at 16 kHz to the session's turn-taking (listening.py)."""
        listener = Listener(
            settings=self._settings, conversation=self._conversation, send=self._conn.send,
            stt=self._stt, turn_model=self._turn_model, speech_model=self._speech_model,
            playback=self.outbound,
            speech_output=lambda: PlayoutSpeechOutput(self.outbound, self._conn.send),
            busy=self._busy, llm_shares_cpu=self._llm_shares_cpu, metrics=self._metrics)
        resampler = Resampler(STT_RATE)
        clock: ArrivalClock | None = None
        try:
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:
                    return
                if clock is None:  # RTP timestamps: the codec's clock, 32 bits
                    base = frame.time_base
                    clock = ArrivalClock(round(1 / base) if base else frame.sample_rate,
                                         wrap=1 << 32)
                arrived = clock.heard(frame.samples / frame.sample_rate, time.monotonic(),
                                      frame.pts)
                await listener.feed(resampler.push_frame(frame), arrived)
        finally:
            await listener.aclose()

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


def rtc_factory(settings: Settings, stt: Transcriber, busy: Callable[[], bool],
                turn_model: TurnModel | None = None, *,
                speech_model: SpeechModel | None = None, llm_shares_cpu: bool = False,
                metrics: Metrics | None = None) -> Callable[[Signaling], RtcPeer]:
    """The per-connection WebRTC constructor the server uses for ``offer`` messages."""
    policy = CandidatePolicy.from_lists(settings.ice_candidate_allow,
                                        settings.ice_candidate_deny,
                                        settings.ice_candidate_min_port)

    def make(conn: Signaling) -> RtcPeer:
        return RtcPeer(conn, settings=settings, stt=stt, busy=busy, policy=policy,
                       turn_model=turn_model, speech_model=speech_model,
                       llm_shares_cpu=llm_shares_cpu, metrics=metrics)

    return make
