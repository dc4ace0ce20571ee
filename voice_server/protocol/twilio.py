"""Twilio Media Streams, bidirectional, sans-I/O (Twilio docs: "Media Streams - WebSocket
Messages"; shared/RECIPES.md "Twilio Media Streams").

Twilio sends JSON text frames: ``connected``, ``start`` (stream and call ids, the media format,
the ``<Parameter>`` values of the TwiML as ``customParameters``), ``media`` (base64 mu-law,
8000 Hz mono, 20 ms a frame), ``dtmf``, ``mark`` (the echo of a mark we sent, once the audio
before it has played, or at once when a ``clear`` dropped it) and ``stop``. We send ``media``,
``mark`` and ``clear``. ``parse_event`` checks size and shape and raises ``TwilioEventError``
(a ``ProtocolError``) on anything else; events Twilio may add later come back as ``None``.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from .codec import ProtocolError
from .codes import ErrorCode

__all__ = [
    "MAX_EVENT_BYTES",
    "Connected",
    "Dtmf",
    "Mark",
    "Media",
    "Start",
    "Stop",
    "TwilioEvent",
    "TwilioEventError",
    "clear",
    "mark",
    "media",
    "parse_event",
    "twiml_connect",
]

MAX_EVENT_BYTES = 64 * 1024  # a 20 ms media event is about 400 bytes; start carries parameters
MAX_PAYLOAD_BYTES = 8000  # one second of mu-law: far more than a frame
DTMF_DIGITS = frozenset("0123456789*#ABCD")


class TwilioEventError(ProtocolError):
    """A Media Streams event we cannot accept (the message says why)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_MESSAGE, message)


@dataclass(frozen=True)
class Connected:
    protocol: str = ""


@dataclass(frozen=True)
class Start:
    stream_sid: str
    call_sid: str
    account_sid: str = ""
    encoding: str = "audio/x-mulaw"
    sample_rate: int = 8000
    channels: int = 1
    custom_parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Media:
    payload: bytes  # mu-law bytes
    track: str = "inbound"
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Dtmf:
    digit: str


@dataclass(frozen=True)
class Mark:
    name: str


@dataclass(frozen=True)
class Stop:
    pass


TwilioEvent = Connected | Start | Media | Dtmf | Mark | Stop


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TwilioEventError(f"{where} must be an object")
    return value


def _text(value: Any, where: str, *, limit: int = 256) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise TwilioEventError(f"{where} must be a string of at most {limit} characters")
    return value


def _milliseconds(value: Any) -> int | None:
    """A media timestamp (Twilio sends digits in a string): None unless it is one. ``"²"``
    passes ``str.isdigit`` and fails ``int``; a string of 5,000 digits fails it too."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def parse_event(raw: str | bytes) -> TwilioEvent | None:
    """One event from Twilio; ``None`` for an event type this module does not know."""
    if len(raw) > MAX_EVENT_BYTES:
        raise TwilioEventError(f"event of {len(raw)} bytes exceeds {MAX_EVENT_BYTES}")
    try:
        data = _obj(json.loads(raw), "an event")
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: deep nesting
        raise TwilioEventError("an event must be a JSON object") from None
    kind = data.get("event")
    if kind == "media":
        body = _obj(data.get("media"), "media.media")
        try:
            payload = base64.b64decode(_text(body.get("payload"), "media.payload",
                                             limit=MAX_PAYLOAD_BYTES * 2), validate=True)
        except binascii.Error:
            raise TwilioEventError("media.payload must be base64") from None
        return Media(payload=payload, track=str(body.get("track") or "inbound"),
                     timestamp_ms=_milliseconds(body.get("timestamp")))
    if kind == "start":
        body = _obj(data.get("start"), "start.start")
        fmt = _obj(body.get("mediaFormat") or {}, "start.mediaFormat")
        params = _obj(body.get("customParameters") or {}, "start.customParameters")
        try:
            rate, channels = int(fmt.get("sampleRate", 8000)), int(fmt.get("channels", 1))
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e999
            raise TwilioEventError("start.mediaFormat has a bad rate or channel count") from None
        return Start(
            stream_sid=_text(body.get("streamSid", data.get("streamSid")), "start.streamSid"),
            call_sid=_text(body.get("callSid", ""), "start.callSid"),
            account_sid=_text(body.get("accountSid", ""), "start.accountSid"),
            encoding=_text(fmt.get("encoding", "audio/x-mulaw"), "mediaFormat.encoding"),
            sample_rate=rate, channels=channels,
            custom_parameters={_text(k, "a parameter name"): _text(v, f"parameter {k}",
                                                                  limit=1024)
                               for k, v in list(params.items())[:32]})
    if kind == "dtmf":
        digit = _text(_obj(data.get("dtmf"), "dtmf.dtmf").get("digit"), "dtmf.digit", limit=1)
        if digit not in DTMF_DIGITS:
            raise TwilioEventError(f"dtmf.digit {digit!r} is not a keypad digit")
        return Dtmf(digit=digit)
    if kind == "mark":
        return Mark(name=_text(_obj(data.get("mark"), "mark.mark").get("name"), "mark.name"))
    if kind == "stop":
        return Stop()
    if kind == "connected":
        return Connected(protocol=str(data.get("protocol") or ""))
    if not isinstance(kind, str):
        raise TwilioEventError("an event needs an 'event' name")
    return None


def media(stream_sid: str, payload: bytes) -> str:
    return json.dumps({"event": "media", "streamSid": stream_sid,
                       "media": {"payload": base64.b64encode(payload).decode()}})


def mark(stream_sid: str, name: str) -> str:
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear(stream_sid: str) -> str:
    return json.dumps({"event": "clear", "streamSid": stream_sid})


def twiml_connect(stream_url: str, parameters: dict[str, str]) -> str:
    """``<Response><Connect><Stream url=...><Parameter .../>`` with Twilio's own TwiML
    builder (it escapes the values)."""
    from twilio.twiml.voice_response import Connect, VoiceResponse  # noqa: PLC0415

    connect = Connect()
    stream = connect.stream(url=stream_url)
    for name, value in parameters.items():
        stream.parameter(name=name, value=value)
    response = VoiceResponse()
    response.append(connect)
    return str(response)
