"""Error codes of llmrtc wire protocol v1 (spec: "Error Codes"), plus the two the reference
``@llmrtc/llmrtc-core`` 1.3 adds (``REALTIME_ERROR``, ``BUDGET_EXCEEDED``)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorCode"]


class ErrorCode(StrEnum):
    # WebRTC / connection
    WEBRTC_UNAVAILABLE = "WEBRTC_UNAVAILABLE"
    CONNECTION_FAILED = "CONNECTION_FAILED"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    SESSION_EXPIRED = "SESSION_EXPIRED"
    # providers
    STT_ERROR = "STT_ERROR"
    STT_TIMEOUT = "STT_TIMEOUT"
    LLM_ERROR = "LLM_ERROR"
    LLM_TIMEOUT = "LLM_TIMEOUT"
    TTS_ERROR = "TTS_ERROR"
    TTS_TIMEOUT = "TTS_TIMEOUT"
    # processing
    AUDIO_PROCESSING_ERROR = "AUDIO_PROCESSING_ERROR"
    VAD_ERROR = "VAD_ERROR"
    INVALID_MESSAGE = "INVALID_MESSAGE"
    INVALID_AUDIO_FORMAT = "INVALID_AUDIO_FORMAT"
    # playbook / tools
    TOOL_ERROR = "TOOL_ERROR"
    PLAYBOOK_ERROR = "PLAYBOOK_ERROR"
    # reference client additions
    REALTIME_ERROR = "REALTIME_ERROR"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    # generic
    INTERNAL_ERROR = "INTERNAL_ERROR"
    RATE_LIMITED = "RATE_LIMITED"
