"""Sans-I/O NDJSON framing and envelope validation of the host protocol, byte-exact."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voice_server.adapters.host import messages as m
from voice_server.adapters.host.codec import LineDecoder, encode
from voice_server.adapters.host.errors import LineTooLong, ProtocolViolation


def test_encode_is_one_compact_line():
    """JSON.stringify + newline: compact, raw UTF-8, key order kept."""
    assert encode(m.chat_chunk("r1", "héllo\n")) == \
        '{"type":"chat_chunk","request_id":"r1","payload":{"text":"héllo\\n"}}\n'.encode()
    assert encode({"t": "\ud800"}) == b'{"t":"\\ud800"}\n'  # lone surrogate: escaped


def test_builders_match_the_origin_shapes():
    """Each builder writes the exact message of the spec."""
    assert m.server_info("h", "m") == {"type": "server_info", "payload": {
        "host_name": "h", "model": "m", "status": "ready"}}
    assert m.chat_end("r", "abort") == {"type": "chat_end", "request_id": "r",
                                        "payload": {"finish_reason": "abort"}}
    assert m.abort("r") == {"type": "abort", "request_id": "r"}
    assert m.error("MODEL_BUSY", "busy", "r") == {"type": "error", "request_id": "r",
                                                  "payload": {"code": "MODEL_BUSY",
                                                              "message": "busy"}}
    assert "request_id" not in m.error("BAD_MESSAGE", "x")


def test_one_byte_at_a_time_and_many_per_chunk():
    """A line split anywhere is decoded once; several lines in one chunk keep their order."""
    data = encode(m.chat_start("r1", "a")) + encode(m.abort("r1"))
    decoder = LineDecoder()
    out = []
    for i in range(len(data)):
        out += decoder.feed(data[i:i + 1])
    assert out == [m.chat_start("r1", "a"), m.abort("r1")]
    assert LineDecoder().feed(data) == out


def test_empty_and_invalid_lines_are_skipped():
    """Empty lines, bad JSON and bad UTF-8 are dropped silently; non-objects pass on."""
    decoder = LineDecoder()
    out = decoder.feed(b'\n\r\n  \nnot json\n{"a":\xff}\n[1]\n{"type":"abort"}\n')
    assert out == [[1], {"type": "abort"}]
    assert decoder.dropped == 2


def test_only_newline_splits():
    """A carriage return or U+2028 inside a line does not split it."""
    assert LineDecoder().feed('{"a":"x\u2028y"}\r\n'.encode()) == [{"a": "x\u2028y"}]


def test_line_limit():
    """A line over the limit raises as soon as it is known, whether or not it is complete."""
    decoder = LineDecoder(max_line_bytes=1024)
    assert decoder.feed(b"x" * 1024) == []
    with pytest.raises(LineTooLong, match="Buffer exceeded 1 KB without finding newline"):
        decoder.feed(b"x")
    assert decoder.pending == 0
    with pytest.raises(LineTooLong):
        LineDecoder(max_line_bytes=1024).feed(b"y" * 1025 + b"\n")
    exact = json.dumps({"k": "v" * 1015}).encode()
    assert len(exact) == 1024 and LineDecoder(max_line_bytes=1024).feed(exact + b"\n")
    assert LineDecoder().max_line_bytes == 64 * 1024


def test_flush_parses_a_last_unterminated_line():
    """At end of stream a last line without a newline still counts."""
    decoder = LineDecoder()
    assert decoder.feed(b'{"a":1}\n{"b":') == [{"a": 1}]
    assert decoder.feed(b"2}") == []
    assert decoder.flush() == [{"b": 2}]


@pytest.mark.parametrize(("value", "text"), [
    ({"payload": {}}, "Invalid message envelope"),
    ({"type": "unknown"}, "Invalid message envelope"),
    ({"type": ["chat_start"]}, "Invalid message envelope"),
    ({"type": "abort", "request_id": 123}, "Invalid message envelope"),
    ([1, 2], "Invalid message envelope"),
    ({"type": "chat_start", "payload": {"prompt": "x"}}, "Invalid chat_start message"),
    ({"type": "chat_start", "request_id": "r", "payload": {"prompt": 1}},
     "Invalid chat_start message"),
    ({"type": "abort"}, "Invalid abort message"),
    ({"type": "chat_end", "request_id": "r", "payload": {"finish_reason": "x"}},
     "Invalid chat_end message"),
    ({"type": "server_info", "payload": {"host_name": "h", "model": "m", "status": "odd"}},
     "Invalid server_info message"),
    ({"type": "error", "payload": {"code": "X"}}, "Invalid error message"),
])
def test_validation_failures(value, text):
    """Bad envelopes and bad shapes give the origin's messages, never a request id."""
    with pytest.raises(ProtocolViolation) as info:
        m.validate(value)
    assert (info.value.code, info.value.message, info.value.request_id) == \
        ("BAD_MESSAGE", text, None)


def test_valid_messages_and_optional_abort_payload():
    """Extra keys are ignored; abort needs no payload."""
    assert m.validate({"type": "abort", "request_id": "r"}) == m.Message("abort", {}, "r")
    assert m.validate({"type": "chat_start", "request_id": "r", "payload": {"prompt": ""},
                       "extra": 1}) == m.Message("chat_start", {"prompt": ""}, "r")
    assert m.validate(m.error("X", "y")).payload == {"code": "X", "message": "y"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(), st.text() | st.integers() | st.none(), max_size=4),
                max_size=5), st.integers(1, 9))
def test_roundtrip_property(objs, step):
    """encode -> decode in arbitrary read sizes gives the same objects in order."""
    data = b"".join(encode(o) for o in objs)
    decoder = LineDecoder()
    out = []
    for i in range(0, len(data), step):
        out += decoder.feed(data[i:i + step])
    assert out == objs


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash(data):
    """Random bytes give values or LineTooLong; validation of any value never crashes."""
    try:
        values = LineDecoder(max_line_bytes=1024).feed(data)
    except LineTooLong:
        return
    for value in values:
        try:
            m.validate(value)
        except ProtocolViolation as exc:
            assert exc.code == "BAD_MESSAGE"
