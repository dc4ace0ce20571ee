"""Every message of llmrtc wire protocol v1 as a typed model (spec: "Message Reference").

Python attributes are snake_case; the wire keeps the spec's camelCase names through aliases.
Unknown extra fields are ignored so newer clients keep working (spec: "Compatibility Notes").
Also the three server messages the reference client understands beyond the spec
(``assistant-transcript``, ``usage``, ``mode-changed``; from ``@llmrtc/llmrtc-core`` 1.3 types).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from .codes import ErrorCode
from .sdp import offer_problem

__all__ = [
    "CLIENT_MESSAGES",
    "SERVER_MESSAGES",
    "AssistantTranscript",
    "Attachments",
    "Audio",
    "Error",
    "LLMChunk",
    "LLMResult",
    "Message",
    "ModeChanged",
    "Offer",
    "Ping",
    "Pong",
    "Ready",
    "Reconnect",
    "ReconnectAck",
    "SessionDescription",
    "Signal",
    "SpeechEnd",
    "SpeechStart",
    "StageChange",
    "ToolCallEnd",
    "ToolCallStart",
    "Transcript",
    "TTSCancelled",
    "TTSChunk",
    "TTSComplete",
    "TTSResult",
    "TTSStart",
    "TurnMetrics",
    "TurnMetricsSubscribe",
    "UsageReport",
    "UserText",
    "VisionAttachment",
]

MAX_SDP_CHARS = 64 * 1024
MAX_ID_CHARS = 256
MAX_ATTACHMENTS = 8
MAX_USER_TEXT_CHARS = 4000


class Message(BaseModel):
    """Base of every protocol message; ``type`` is the discriminator."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              frozen=True)
    type: str


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


# --- shared shapes -------------------------------------------------------------------------

class SessionDescription(BaseModel):
    """RTCSessionDescriptionInit."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    type: Literal["offer", "answer", "pranswer", "rollback"]
    sdp: str = Field("", max_length=MAX_SDP_CHARS)


class VisionAttachment(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              frozen=True)
    data: str = Field(min_length=1)
    mime_type: str | None = Field(None, max_length=100)
    alt: str | None = Field(None, max_length=1000)


# --- client -> server ----------------------------------------------------------------------

class Ping(Message):
    type: Literal["ping"] = "ping"
    timestamp: float

    _check = field_validator("timestamp")(_finite)


class Offer(Message):
    """Its SDP must have the shape of an offer (see ``sdp.offer_problem``)."""

    type: Literal["offer"] = "offer"
    signal: SessionDescription

    @field_validator("signal")
    @classmethod
    def _an_offer(cls, signal: SessionDescription) -> SessionDescription:
        if signal.type == "offer" and (problem := offer_problem(signal.sdp)) is not None:
            raise ValueError(f"the SDP {problem}")
        return signal


class Reconnect(Message):
    type: Literal["reconnect"] = "reconnect"
    session_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)


class Audio(Message):
    type: Literal["audio"] = "audio"
    data: str = Field(min_length=1)
    attachments: list[VisionAttachment] | None = Field(None, max_length=MAX_ATTACHMENTS)


class UserText(Message):
    """Extension (not in the spec; the reference client never sends it): a typed user turn,
    answered like a spoken one, in text and speech."""

    type: Literal["user-text"] = "user-text"
    text: str = Field(min_length=1, max_length=MAX_USER_TEXT_CHARS)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("must not be blank")
        return text


class TurnMetricsSubscribe(Message):
    """Extension: the client asks for ``turn-metrics`` after each turn (opt-in, so clients
    that do not know the message never get it)."""

    type: Literal["turn-metrics-subscribe"] = "turn-metrics-subscribe"


class Attachments(Message):
    type: Literal["attachments"] = "attachments"
    attachments: list[VisionAttachment] = Field(max_length=MAX_ATTACHMENTS)


# --- server -> client ----------------------------------------------------------------------

class Ready(Message):
    type: Literal["ready"] = "ready"
    id: str
    protocol_version: int = 1
    ice_servers: list[dict[str, Any]] | None = None
    mode: Literal["pipeline", "realtime"] | None = None


class Pong(Message):
    type: Literal["pong"] = "pong"
    timestamp: float


class Signal(Message):
    type: Literal["signal"] = "signal"
    signal: SessionDescription


class ReconnectAck(Message):
    type: Literal["reconnect-ack"] = "reconnect-ack"
    success: bool
    session_id: str
    history_recovered: bool


class Transcript(Message):
    type: Literal["transcript"] = "transcript"
    text: str
    is_final: bool


class AssistantTranscript(Message):
    type: Literal["assistant-transcript"] = "assistant-transcript"
    text: str
    is_final: bool


class TurnMetrics(Message):
    """Extension: one answered turn as the server measured it, in ms from the end of the
    user's speech (or from the request, for a typed turn); sent to subscribers only."""

    type: Literal["turn-metrics"] = "turn-metrics"
    stt_ms: float | None = None
    llm_ttft_ms: float | None = None
    tts_first_audio_ms: float | None = None
    first_audio_ms: float | None = None
    total_ms: float | None = None
    interrupted: bool = False
    end_of_turn_ms: float | None = None  # end of speech -> the decision the turn is over
    end_of_turn: str | None = None  # why: "complete", "unfinished words", ... (listening.py)


class UsageReport(Message):
    type: Literal["usage"] = "usage"
    input_tokens: int
    output_tokens: int
    audio_input_tokens: int | None = None
    audio_output_tokens: int | None = None
    cached_tokens: int | None = None


class ModeChanged(Message):
    type: Literal["mode-changed"] = "mode-changed"
    mode: Literal["pipeline", "realtime"]


class LLMChunk(Message):
    type: Literal["llm-chunk"] = "llm-chunk"
    content: str
    done: bool


class LLMResult(Message):
    type: Literal["llm"] = "llm"
    text: str


class TTSStart(Message):
    type: Literal["tts-start"] = "tts-start"


class TTSChunk(Message):
    type: Literal["tts-chunk"] = "tts-chunk"
    format: str
    sample_rate: int
    data: str


class TTSResult(Message):
    type: Literal["tts"] = "tts"
    format: str
    data: str


class TTSComplete(Message):
    type: Literal["tts-complete"] = "tts-complete"


class TTSCancelled(Message):
    type: Literal["tts-cancelled"] = "tts-cancelled"


class SpeechStart(Message):
    type: Literal["speech-start"] = "speech-start"


class SpeechEnd(Message):
    type: Literal["speech-end"] = "speech-end"


class ToolCallStart(Message):
    type: Literal["tool-call-start"] = "tool-call-start"
    name: str
    call_id: str
    arguments: dict[str, Any]


class ToolCallEnd(Message):
    type: Literal["tool-call-end"] = "tool-call-end"
    call_id: str
    result: Any = None
    error: str | None = None
    duration_ms: float


class StageChange(Message):
    model_config = ConfigDict(alias_generator=None, populate_by_name=True, extra="ignore",
                              frozen=True)
    type: Literal["stage-change"] = "stage-change"
    from_: str = Field(alias="from")
    to: str
    reason: str


class Error(Message):
    type: Literal["error"] = "error"
    code: ErrorCode
    message: str


CLIENT_MESSAGES: dict[str, type[Message]] = {
    m.model_fields["type"].default: m
    for m in (Ping, Offer, Reconnect, Audio, Attachments, UserText, TurnMetricsSubscribe)
}
SERVER_MESSAGES: dict[str, type[Message]] = {
    m.model_fields["type"].default: m
    for m in (Ready, Pong, Signal, ReconnectAck, Transcript, AssistantTranscript, UsageReport,
              ModeChanged, LLMChunk, LLMResult, TTSStart, TTSChunk, TTSResult, TTSComplete,
              TTSCancelled, SpeechStart, SpeechEnd, ToolCallStart, ToolCallEnd, StageChange,
              Error, TurnMetrics)
}
