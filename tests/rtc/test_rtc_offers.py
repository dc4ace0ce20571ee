"""Bad SDP offers (issue 20, item 4): a clear error code, and nothing left behind; the same
connection then negotiates a good offer."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.rtc.peer import RtcClient
from voice_server.protocol.sdp import MAX_MEDIA_SECTIONS
from voice_server.server.app import VoiceServer

pytestmark = pytest.mark.slow


async def _real_offer_sdp() -> str:
    from aiortc import RTCPeerConnection

    from tests.rtc.peer import OutboundAudioTrack

    pc = RTCPeerConnection()
    try:
        pc.addTrack(OutboundAudioTrack())
        pc.createDataChannel("data")
        await pc.setLocalDescription(await pc.createOffer())
        return pc.localDescription.sdp
    finally:
        await pc.close()


def _many_audio_sections(sdp: str, count: int) -> str:
    """``sdp`` with its audio section repeated ``count`` times, each with its own mid."""
    head, *sections = re.split(r"(?=^m=)", sdp, flags=re.M)
    audio = next(s for s in sections if s.startswith("m=audio"))
    keep = ("m=", "c=", "a=mid", "a=ice-", "a=fingerprint:sha-256", "a=setup", "a=rtcp-mux",
            "a=sendrecv", "a=rtpmap:111", "a=fmtp:111")
    audio = "".join(line for line in audio.splitlines(keepends=True) if line.startswith(keep))
    copies = [re.sub(r"^a=mid:.*$", f"a=mid:a{i}", audio, flags=re.M) for i in range(count)]
    head = re.sub(r"^a=group:BUNDLE.*$", "a=group:BUNDLE " + " ".join(
        f"a{i}" for i in range(count)), head, flags=re.M)
    return head + "".join(copies)


async def _error_after_offer(client: RtcClient, sdp: str) -> dict:
    seen = len(client.ws_messages)
    await client.send({"type": "offer", "signal": {"type": "offer", "sdp": sdp}})
    async with asyncio.timeout(10):
        while True:
            fresh = [m for _, m in client.ws_messages[seen:] if m["type"] in ("error", "signal")]
            if fresh:
                return fresh[0]
            await asyncio.sleep(0.02)


def _server_peer(server: VoiceServer):
    (conn,) = server.live.values()
    return conn.rtc


async def test_bad_offers_get_a_clear_code_and_leave_nothing_behind(rtc_server, url):
    real = await _real_offer_sdp()
    no_credentials = "".join(line for line in real.splitlines(keepends=True)
                             if not line.startswith("a=ice-ufrag"))
    cases = {
        "garbage": "hello, I am not an SDP",
        "no media": "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n",
        "100 m-lines": _many_audio_sections(real, 100),
        "no ICE credentials": no_credentials,  # aiortc refuses these two
        "bad DTLS setup": real.replace("a=setup:actpass", "a=setup:bogus"),
    }
    assert len(cases["100 m-lines"]) < 64 * 1024  # under the message's SDP size limit
    async with RtcClient(url) as client:
        for name, sdp in cases.items():
            answer = await _error_after_offer(client, sdp)
            assert answer["type"] == "error", f"{name}: answered {answer}"
            assert answer["code"] == "INVALID_MESSAGE", f"{name}: {answer}"
            assert "SDP" in answer["message"], f"{name}: {answer['message']}"
            if name == "100 m-lines":
                assert "100 media sections" in answer["message"]
            assert _server_peer(rtc_server) is None, f"{name}: a peer was left behind"
        await client.negotiate()  # the connection still works
        peer = _server_peer(rtc_server)
        assert peer is not None and len(peer.pc.getTransceivers()) <= MAX_MEDIA_SECTIONS


class _Listener(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.packets: list[bytes] = []

    def datagram_received(self, data: bytes, addr) -> None:
        self.packets.append(data)


async def test_the_server_sends_no_checks_to_candidates_it_does_not_allow(rtc_server, url):
    """A client names 127.0.0.2 (not in ice_candidate_allow) beside its real candidates: the
    call connects on the allowed one and not one packet goes to the other (item 8)."""
    loop = asyncio.get_running_loop()
    transport, listener = await loop.create_datagram_endpoint(
        _Listener, local_addr=("127.0.0.2", 0))
    port = transport.get_extra_info("sockname")[1]
    planted = f"a=candidate:9 1 udp 2130706431 127.0.0.2 {port} typ host"

    def plant(sdp: str) -> str:
        return re.sub(r"^(a=candidate:.*)$", rf"\1\r\n{planted}", sdp, count=1, flags=re.M)

    try:
        async with RtcClient(url) as client:
            await client.negotiate(edit_sdp=plant)
            await asyncio.sleep(2.0)  # aioice checks every pair within its first second
            assert client.pc.iceConnectionState in ("connected", "completed")
        assert listener.packets == [], "the server sent ICE checks to a refused candidate"
    finally:
        transport.close()
