"""The inbound audio jitter buffer depth (server/rtc.py, ``rtc_jitter_prefetch_frames``)."""

from __future__ import annotations

from aiortc import RTCPeerConnection

from voice_server.config import Settings
from voice_server.server.rtc import set_audio_jitter_prefetch


async def test_audio_receivers_get_the_configured_prefetch() -> None:
    pc = RTCPeerConnection()
    try:
        pc.addTransceiver("audio", direction="recvonly")
        buffers = lambda: [t.receiver._RTCRtpReceiver__jitter_buffer  # noqa: E731
                           for t in pc.getTransceivers()]
        assert [b._prefetch for b in buffers()] == [4]  # aiortc's own default
        assert set_audio_jitter_prefetch(pc, Settings().rtc_jitter_prefetch_frames)
        assert [(b._prefetch, b.capacity) for b in buffers()] == [(2, 16)]
    finally:
        await pc.close()


async def test_video_receivers_are_left_alone() -> None:
    pc = RTCPeerConnection()
    try:
        pc.addTransceiver("video", direction="recvonly")
        assert not set_audio_jitter_prefetch(pc, 1)
    finally:
        await pc.close()
