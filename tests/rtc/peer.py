"""A scripted aiortc client peer for tests and benchmarks: speaks WAV audio into its track,
records what it hears, and collects protocol messages from the WebSocket and the data channel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import websockets
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from voice_server.compat import restrict_ice_host_addresses, set_audio_jitter_prefetch
from voice_server.pipeline.audio import decode_wav
from voice_server.server.rtc_audio import OutboundAudioTrack

__all__ = ["RtcClient", "mono_pcm"]


def mono_pcm(frame: Any) -> np.ndarray:
    """A received audio frame as mono int16 (aiortc delivers Opus as 48 kHz stereo)."""
    pcm = frame.to_ndarray().reshape(-1)
    if frame.layout.name == "stereo":
        pcm = pcm[0::2]
    return pcm.astype(np.int16)

FRAME_S = 0.02


class RtcClient:
    """``async with RtcClient(url) as c: await c.negotiate(); await c.say(wav48k)``."""

    def __init__(self, url: str, *, jitter_prefetch: int = 1) -> None:
        """``jitter_prefetch``: frames our receiving jitter buffer holds (1: a frame counts
        as heard when the next one arrives, close to RTP arrival; aiortc's default is 4)."""
        self.url = url
        self.jitter_prefetch = jitter_prefetch
        self.ws: Any = None
        self.ready: dict[str, Any] = {}
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = OutboundAudioTrack()
        self.channel = self.pc.createDataChannel("data")
        self.ws_messages: list[tuple[float, dict[str, Any]]] = []
        self.dc_messages: list[tuple[float, dict[str, Any]]] = []
        self.heard: list[tuple[float, np.ndarray]] = []  # (arrival time, 48 kHz mono int16)
        self._tasks: list[asyncio.Task[Any]] = []
        self._signals: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._dc_event = asyncio.Event()
        self._channel_open = asyncio.Event()
        self.channel.on("open", self._channel_open.set)
        self.channel.on("message", self._on_dc)
        self.pc.on("track", self._on_track)

    async def __aenter__(self) -> RtcClient:
        self.ws = await websockets.connect(self.url, max_size=None)
        self.ready = json.loads(await self.ws.recv())
        self._tasks.append(asyncio.create_task(self._read_ws(), name="client-ws"))
        self._tasks.append(asyncio.create_task(self._heartbeat(), name="client-ping"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.mic.stop()
        await self.pc.close()
        if self.ws is not None:
            await self.ws.close()

    # ---- signaling -------------------------------------------------------------------------
    async def send(self, payload: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(payload))

    async def negotiate(self, *, with_mic: bool = True, timeout: float = 10,
                        edit_sdp: Callable[[str], str] = str) -> None:
        """Offer, apply the answer, wait for the data channel; ``edit_sdp`` may change the
        offer's text on its way to the server."""
        if with_mic and not any(t.sender.track is self.mic for t in self.pc.getTransceivers()):
            self.pc.addTrack(self.mic)
        offer = await self.pc.createOffer()
        restrict_ice_host_addresses(self.pc, ["127.0.0.1"])
        await self.pc.setLocalDescription(offer)
        sdp = edit_sdp(self.pc.localDescription.sdp)
        await self.send({"type": "offer", "signal": {"type": "offer", "sdp": sdp}})
        answer = await asyncio.wait_for(self._signals.get(), timeout)
        await self.pc.setRemoteDescription(RTCSessionDescription(**answer["signal"]))
        set_audio_jitter_prefetch(self.pc, self.jitter_prefetch)
        await asyncio.wait_for(self._channel_open.wait(), timeout)

    async def _heartbeat(self, every_s: float = 15.0) -> None:
        """``ping`` every 15 s, as the reference client does (spec: "ping"); without it the
        server closes a connection that only carries WebRTC audio after its idle timeout."""
        while True:
            await asyncio.sleep(every_s)
            await self.send({"type": "ping", "timestamp": int(time.time() * 1000)})

    async def _read_ws(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            self.ws_messages.append((time.monotonic(), msg))
            if msg["type"] == "signal":
                self._signals.put_nowait(msg)

    def _on_dc(self, raw: str) -> None:
        self.dc_messages.append((time.monotonic(), json.loads(raw)))
        self._dc_event.set()

    # ---- audio -----------------------------------------------------------------------------
    def _on_track(self, track: Any) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._record(track), name="client-record"))

    async def _record(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.heard.append((time.monotonic(), mono_pcm(frame)))

    def say(self, wav: bytes) -> float:
        """Queue a WAV on the mic; returns the monotonic time its audio starts playing
        (approximately: now, when the mic is idle)."""
        pcm48 = decode_wav(wav, max_seconds=120, to_rate=48_000)
        self.mic.enqueue(pcm48)
        return time.monotonic()

    # ---- waiting ---------------------------------------------------------------------------
    def messages(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [m for _, m in self.dc_messages if kind is None or m["type"] == kind]

    def first_time(self, kind: str, after: float = 0.0) -> float | None:
        return next((t for t, m in self.dc_messages if m["type"] == kind and t >= after), None)

    async def wait_for(self, kind: str, *, count: int = 1, timeout: float = 60) -> dict[str, Any]:
        """Wait until ``count`` data-channel messages of ``kind`` arrived; return the last."""
        async with asyncio.timeout(timeout):
            while len(found := self.messages(kind)) < count:
                self._dc_event.clear()
                await self._dc_event.wait()
        return found[count - 1]

    def heard_between(self, start: float, end: float) -> np.ndarray:
        parts = [pcm for t, pcm in self.heard if start <= t <= end]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
