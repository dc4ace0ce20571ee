"""Sans-I/O framing of the broker protocol (spec "Transport framing"), byte-exact."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voice_server.adapters.broker.codec import (
    DEFAULT_MAX_MESSAGE_BYTES,
    FrameDecoder,
    decode_payload,
    encode_frame,
)
from voice_server.adapters.broker.errors import FrameError, FrameTooLarge, FrameTruncated
from voice_server.adapters.broker.messages import WireRequest, WireResponse, try_parse_request

FRAME = b'\x00\x00\x00\x11{"a":1,"\xc3\xa9":"\xc3\xbc"}'


def test_encode_is_compact_utf8_with_big_endian_prefix():
    """The payload is compact JSON with raw non-ASCII, after a 4-byte big-endian length."""
    assert encode_frame({"a": 1, "é": "ü"}) == FRAME


def test_encode_rejects_non_objects_and_oversize():
    """Only objects are framed, and never beyond the cap."""
    with pytest.raises(FrameError, match="must be an object"):
        encode_frame([1, 2])  # type: ignore[arg-type]
    with pytest.raises(FrameTooLarge, match="Frame too large: 11 bytes \\(max 10\\)"):
        encode_frame({"k": "123"}, max_bytes=10)


def test_default_cap_is_ten_million_bytes():
    """10 MB is decimal, as in the origin."""
    assert DEFAULT_MAX_MESSAGE_BYTES == 10_000_000


def test_decoder_one_byte_at_a_time():
    """A frame fed one byte at a time yields exactly one payload, on the last byte."""
    decoder = FrameDecoder()
    seen = [decoder.feed(FRAME[i:i + 1]) for i in range(len(FRAME))]
    assert seen[:-1] == [[]] * (len(FRAME) - 1)
    assert seen[-1] == [FRAME[4:]]
    assert decoder.eof() is False


def test_decoder_split_prefix_and_many_frames_in_one_chunk():
    """A prefix split across reads, then two whole frames and a partial one in one read."""
    two = encode_frame({"n": 1}) + encode_frame({"n": 2})
    decoder = FrameDecoder()
    assert decoder.feed(two[:2]) == []
    assert decoder.feed(two[2:] + FRAME[:7]) == [b'{"n":1}', b'{"n":2}']
    assert decoder.pending == 3
    assert decoder.feed(FRAME[7:]) == [FRAME[4:]]


def test_oversize_prefix_rejected_before_payload():
    """The cap is checked from the prefix alone; no payload byte is buffered."""
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(struct.pack(">I", DEFAULT_MAX_MESSAGE_BYTES + 1))
    assert str(info.value) == "Frame too large: 10000001 bytes (max 10000000)"
    assert decoder.pending == 0
    with pytest.raises(FrameError, match="cannot be resynchronised"):
        decoder.feed(b"{}")


def test_payload_of_exactly_the_cap_is_allowed():
    """Rejection needs length > max; length == max passes."""
    decoder = FrameDecoder(max_bytes=8)
    assert decoder.feed(struct.pack(">I", 8) + b'{"a":"b"}'[:8]) == [b'{"a":"b"'[:8]]
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_bytes=8).feed(struct.pack(">I", 9))


def test_short_reads_at_eof():
    """A close inside the prefix or the payload is a truncated frame; at a boundary, nothing."""
    clean = FrameDecoder()
    clean.feed(FRAME)
    assert clean.eof() is False
    in_prefix = FrameDecoder()
    in_prefix.feed(FRAME[:3])
    with pytest.raises(FrameTruncated, match="prefix"):
        in_prefix.eof()
    in_payload = FrameDecoder()
    in_payload.feed(FRAME[:10])
    with pytest.raises(FrameTruncated, match="Connection closed before message complete"):
        in_payload.eof()


@pytest.mark.parametrize("payload", [b"[1,2]", b'"text"', b"42", b"null", b"true"])
def test_non_object_payloads_rejected(payload):
    """A payload that is valid JSON but not an object is refused."""
    with pytest.raises(FrameError, match="Frame JSON must be an object"):
        decode_payload(payload)


def test_invalid_utf8_and_json_rejected_with_decoder_text():
    """Bad UTF-8 and bad JSON give the decoder's own message (the origin passes it through)."""
    with pytest.raises(FrameError, match="can't decode byte 0xff"):
        decode_payload(b'{"a":"\xff"}')
    with pytest.raises(FrameError, match="Expecting value"):
        decode_payload(b"[oops")


def test_deep_nesting_is_an_error_not_a_crash():
    """A payload nested past the recursion limit is refused."""
    with pytest.raises(FrameError):
        decode_payload(b"[" * 100_000 + b"]" * 100_000)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), _json, max_size=6), st.integers(1, 7))
def test_roundtrip_property(obj, step):
    """encode -> decode in arbitrary read sizes gives back the same object."""
    frame = encode_frame(obj)
    decoder = FrameDecoder()
    payloads = []
    for i in range(0, len(frame), step):
        payloads += decoder.feed(frame[i:i + step])
    assert [decode_payload(p) for p in payloads] == [obj]
    assert json.loads(frame[4:]) == obj


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data):
    """Random bytes give payloads, a FrameError, or nothing; every payload parses safely."""
    decoder = FrameDecoder(max_bytes=64)
    try:
        payloads = decoder.feed(data)
    except FrameError:
        return
    for payload in payloads:
        parsed = try_parse_request(payload)
        assert isinstance(parsed, WireRequest | WireResponse)
        if isinstance(parsed, WireResponse):
            assert parsed.error and "Traceback" not in parsed.error


@settings(max_examples=250, deadline=None)
@given(st.binary(max_size=120))
def test_random_payload_with_valid_prefix_gives_one_answer(payload):
    """A valid prefix around random bytes always decodes to a request or one error response."""
    frames = FrameDecoder().feed(struct.pack(">I", len(payload)) + payload)
    assert frames == [payload]
    parsed = try_parse_request(frames[0])
    if isinstance(parsed, WireResponse):
        assert parsed.results is None and parsed.error
        assert parsed.correlation_id is None or isinstance(parsed.correlation_id, str)
