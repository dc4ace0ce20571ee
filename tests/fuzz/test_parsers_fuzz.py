"""Property tests of the parsers not covered elsewhere (issue 20, "Tests"): WAV decoding, the
offer's SDP shape check and the ICE candidate filter. Whatever arrives, each either succeeds
or raises its own documented error; nothing else escapes."""

from __future__ import annotations

import base64
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voice_server.pipeline.audio import AudioFormatError, decode_base64_wav, decode_wav, wav_bytes
from voice_server.protocol import ProtocolError, parse_client
from voice_server.protocol.messages import Offer
from voice_server.protocol.sdp import offer_problem
from voice_server.server.ice_policy import CandidatePolicy, filter_offer_candidates

GOOD_WAV = wav_bytes((np.sin(np.arange(1600) / 5) * 8000).astype(np.int16), 16000)


@st.composite
def mutated_wavs(draw: st.DrawFn) -> bytes:
    """A real WAV with header fields rewritten, bytes flipped, cut or extended."""
    data = bytearray(GOOD_WAV)
    for _ in range(draw(st.integers(0, 4))):
        field = draw(st.sampled_from([4, 16, 20, 22, 24, 28, 32, 34, 40]))  # RIFF/fmt/data
        width = 2 if field in (20, 22, 32, 34) else 4
        value = draw(st.integers(0, 2 ** (8 * width) - 1))
        data[field:field + width] = value.to_bytes(width, "little")
    for _ in range(draw(st.integers(0, 3))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) + draw(st.binary(max_size=20))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | mutated_wavs())
def test_wav_decoding_returns_audio_or_a_format_error(data: bytes) -> None:
    try:
        pcm = decode_wav(data, max_seconds=5)
    except AudioFormatError as exc:
        assert str(exc)
        return
    assert pcm.dtype == np.int16 and pcm.ndim == 1


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=100) | mutated_wavs().map(lambda b: base64.b64encode(b).decode()))
def test_base64_wav_decoding_returns_audio_or_a_format_error(text: str) -> None:
    try:
        decode_base64_wav(text, max_seconds=5)
    except AudioFormatError as exc:
        assert str(exc)


def test_a_huge_declared_size_is_refused_by_length() -> None:
    data = bytearray(GOOD_WAV)
    data[40:44] = struct.pack("<I", 0xFFFFFFF0)  # the data chunk claims 4 GB: 37 hours
    with pytest.raises(AudioFormatError, match="the limit is 5 s"):
        decode_wav(bytes(data), max_seconds=5)


SDP_LINES = ["v=0", "o=- 1 1 IN IP4 0.0.0.0", "s=-", "t=0 0", "a=group:BUNDLE 0",
             "m=audio 9 UDP/TLS/RTP/SAVPF 111", "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
             "c=IN IP4 0.0.0.0", "a=mid:0", "a=end-of-candidates",
             "a=candidate:1 1 udp 2130706431 81.2.69.160 50000 typ host",
             "a=candidate:2 1 udp 2130706431 10.0.0.1 50000 typ host",
             "a=candidate:3 1 udp 1 x.local 9 typ host", "a=candidate:", "m=", "x"]
sdps = (st.text(max_size=300)
        | st.lists(st.sampled_from(SDP_LINES) | st.text(max_size=30), max_size=30).map(
            "\r\n".join)
        | st.lists(st.sampled_from(SDP_LINES), max_size=30).map("\n".join))
POLICY = CandidatePolicy.from_lists(["192.168.0.0/16"], ["81.2.69.0/24"], 1024)


@settings(max_examples=400, deadline=None)
@given(sdps)
def test_sdp_checks_and_candidate_filter_never_fail(sdp: str) -> None:
    problem = offer_problem(sdp)
    assert problem is None or isinstance(problem, str)
    kept, refused = filter_offer_candidates(sdp, POLICY)
    assert all(isinstance(r, str) for r in refused)
    offered = [line for line in sdp.replace("\r\n", "\n").split("\n")
               if line.startswith("a=candidate:")]
    used = [line for line in kept.split("\r\n") if line.startswith("a=candidate:")]
    assert len(used) + len(refused) == len(offered)  # each candidate kept or refused
    assert all(POLICY.refusal(line.split()[4], int(line.split()[5])) is None for line in used)


@settings(max_examples=200, deadline=None)
@given(sdps)
def test_an_offer_message_is_parsed_or_refused_with_invalid_message(sdp: str) -> None:
    frame = json.dumps({"type": "offer", "signal": {"type": "offer", "sdp": sdp}})
    try:
        message = parse_client(frame)
    except ProtocolError as exc:
        assert exc.code.value == "INVALID_MESSAGE" and "SDP" in str(exc)
        return
    assert isinstance(message, Offer) and offer_problem(sdp) is None


def test_a_chunk_longer_than_the_file_is_a_format_error_not_a_crash() -> None:
    """Found by the fuzzer: the stdlib's wave raises a bare RuntimeError here."""
    data = b"RIFF\x00\x00\x00\x01WAVE" + b"\x00" * 31 + b"\x01"
    with pytest.raises(AudioFormatError, match="corrupt WAV"):
        decode_wav(data, max_seconds=5)


def test_the_decoder_s_own_refusals_keep_their_message() -> None:
    three_channels = bytearray(GOOD_WAV)
    three_channels[22:24] = (3).to_bytes(2, "little")
    with pytest.raises(AudioFormatError, match="mono or stereo"):
        decode_wav(bytes(three_channels), max_seconds=5)
