"""Sans-I/O tests of the llmrtc v1 protocol module: every message round-trips, bad input is
rejected with INVALID_MESSAGE and a clear message."""

from __future__ import annotations

import json

import pytest

from voice_server import protocol as p

CLIENT_SAMPLES = [
    {"type": "ping", "timestamp": 1700000000000},
    {"type": "offer", "signal": {"type": "offer", "sdp": "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n"
                                 "s=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"}},
    {"type": "reconnect", "sessionId": "abc123"},
    {"type": "audio", "data": "UklGRg=="},
    {"type": "audio", "data": "UklGRg==",
     "attachments": [{"data": "data:image/png;base64,AAAA", "mimeType": "image/png",
                      "alt": "a dot"}]},
    {"type": "attachments", "attachments": [{"data": "https://example.invalid/x.jpg"}]},
    {"type": "user-text", "text": "Why is the sky blue?"},
    {"type": "turn-metrics-subscribe"},
]

SERVER_SAMPLES = [
    {"type": "turn-metrics", "sttMs": 210.0, "llmTtftMs": 120.5, "ttsFirstAudioMs": 300.0,
     "firstAudioMs": 640.5, "totalMs": 1900.0, "interrupted": False},
    {"type": "ready", "id": "s1", "protocolVersion": 1, "iceServers": []},
    {"type": "ready", "id": "s1", "protocolVersion": 1, "mode": "pipeline"},
    {"type": "pong", "timestamp": 12.5},
    {"type": "signal", "signal": {"type": "answer", "sdp": "v=0\r\n"}},
    {"type": "reconnect-ack", "success": True, "sessionId": "s1", "historyRecovered": True},
    {"type": "transcript", "text": "hello", "isFinal": False},
    {"type": "assistant-transcript", "text": "hi", "isFinal": True},
    {"type": "usage", "inputTokens": 3, "outputTokens": 4, "cachedTokens": 1},
    {"type": "mode-changed", "mode": "realtime"},
    {"type": "llm-chunk", "content": "Hi", "done": False},
    {"type": "llm", "text": "Hi there!"},
    {"type": "tts-start"},
    {"type": "tts-chunk", "format": "pcm", "sampleRate": 22050, "data": "AAAA"},
    {"type": "tts", "format": "mp3", "data": "AAAA"},
    {"type": "tts-complete"},
    {"type": "tts-cancelled"},
    {"type": "speech-start"},
    {"type": "speech-end"},
    {"type": "tool-call-start", "name": "bookTable", "callId": "xyz", "arguments": {"n": 2}},
    {"type": "tool-call-end", "callId": "xyz", "result": {"ok": True}, "durationMs": 12.0},
    {"type": "tool-call-end", "callId": "xyz", "error": "boom", "durationMs": 3.0},
    {"type": "stage-change", "from": "greeting", "to": "confirmation", "reason": "tool_result"},
    {"type": "error", "code": "INVALID_MESSAGE", "message": "bad"},
]


@pytest.mark.parametrize("sample", CLIENT_SAMPLES, ids=lambda s: s["type"])
def test_client_messages_round_trip(sample):
    """A client message parses to its model and serializes back to the same JSON."""
    msg = p.parse_client(json.dumps(sample))
    assert msg.type == sample["type"]
    assert json.loads(p.encode(msg)) == sample


@pytest.mark.parametrize("sample", SERVER_SAMPLES, ids=lambda s: s["type"])
def test_server_messages_round_trip(sample):
    """A server message parses to its model and serializes back to the same JSON."""
    msg = p.parse_server(json.dumps(sample))
    assert json.loads(p.encode(msg)) == sample


def test_every_type_is_covered():
    """Every spec message type plus the reference client's three extras has a model, and our
    our extensions (``user-text``, ``turn-metrics-subscribe`` / ``turn-metrics``,
    docs/protocol.md)."""
    spec_client = {"ping", "offer", "reconnect", "audio", "attachments", "user-text",
                   "turn-metrics-subscribe"}
    spec_server = {"ready", "pong", "signal", "reconnect-ack", "transcript", "llm-chunk", "llm",
                   "tts-start", "tts-chunk", "tts", "tts-complete", "tts-cancelled",
                   "speech-start", "speech-end", "tool-call-start", "tool-call-end",
                   "stage-change", "error", "assistant-transcript", "usage", "mode-changed",
                   "turn-metrics"}
    assert set(p.CLIENT_MESSAGES) == spec_client
    assert set(p.SERVER_MESSAGES) == spec_server
    assert p.PROTOCOL_VERSION == 1


def test_error_codes_match_spec():
    """Every error code of the spec (and the reference client's two extras) exists."""
    spec = {"WEBRTC_UNAVAILABLE", "CONNECTION_FAILED", "SESSION_NOT_FOUND", "SESSION_EXPIRED",
            "STT_ERROR", "STT_TIMEOUT", "LLM_ERROR", "LLM_TIMEOUT", "TTS_ERROR", "TTS_TIMEOUT",
            "AUDIO_PROCESSING_ERROR", "VAD_ERROR", "INVALID_MESSAGE", "INVALID_AUDIO_FORMAT",
            "TOOL_ERROR", "PLAYBOOK_ERROR", "INTERNAL_ERROR", "RATE_LIMITED", "REALTIME_ERROR",
            "BUDGET_EXCEEDED"}
    assert {c.value for c in p.ErrorCode} == spec


BAD = [
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('"ping"', "must be a JSON object"),
    ("{}", "'type'"),
    ('{"type": 5}', "'type'"),
    ('{"type": ""}', "'type'"),
    ('{"type": "ping"}', "timestamp"),
    ('{"type": "ping", "timestamp": "soon"}', "timestamp"),
    ('{"type": "ping", "timestamp": NaN}', "finite"),
    ('{"type": "offer"}', "signal"),
    ('{"type": "offer", "signal": {"type": "bogus", "sdp": ""}}', "signal.type"),
    ('{"type": "reconnect", "sessionId": ""}', "sessionId"),
    ('{"type": "reconnect", "sessionId": 42}', "sessionId"),
    ('{"type": "audio"}', "data"),
    ('{"type": "audio", "data": ""}', "data"),
    ('{"type": "attachments", "attachments": "x"}', "attachments"),
    ('{"type": "attachments", "attachments": [{}]}', "attachments.0.data"),
    ("[" * 100000, "not valid JSON"),
]


@pytest.mark.parametrize(("text", "needle"), BAD)
def test_malformed_client_messages_are_rejected(text, needle):
    """Malformed input raises ProtocolError(INVALID_MESSAGE) naming the problem."""
    with pytest.raises(p.ProtocolError) as info:
        p.parse_client(text)
    assert info.value.code is p.ErrorCode.INVALID_MESSAGE
    assert needle in str(info.value)
    err = json.loads(p.encode(info.value.to_message()))
    assert err["type"] == "error" and err["code"] == "INVALID_MESSAGE"


def test_binary_frames_are_rejected():
    """Binary frames are not part of the protocol."""
    with pytest.raises(p.ProtocolError, match="binary"):
        p.parse_client(b'{"type": "ping", "timestamp": 1}')


def test_unknown_types_are_returned_not_rejected():
    """Unknown but well-formed types come back as UnknownMessage (spec: Compatibility Notes)."""
    msg = p.parse_client('{"type": "future-thing", "x": 1}')
    assert msg == p.UnknownMessage("future-thing")


def test_extra_fields_are_ignored():
    """Newer clients may add fields; they are ignored."""
    msg = p.parse_client('{"type": "ping", "timestamp": 1, "extra": true}')
    assert msg == p.Ping(timestamp=1)


def test_public_names():
    """The protocol package exports what we mean it to."""
    assert {"PROTOCOL_VERSION", "parse_client", "encode", "ErrorCode", "Ready",
            "StageChange"} <= set(p.__all__)
