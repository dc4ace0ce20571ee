"""Prometheus metrics and the per-turn timing record (one place for every stage's timing)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import asdict, dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["TURN_OUTCOMES", "Metrics", "TurnRecord", "session_tag"]

TURN_OUTCOMES = ("completed", "interrupted", "taken_back", "error")
_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


def session_tag(session_id: str) -> str:
    """How logs and TURN usernames name a session: a digest, never the id itself (whoever
    holds the id can resume the conversation with ``reconnect``)."""
    return "s-" + hashlib.sha256(session_id.encode()).hexdigest()[:12]


@dataclass
class TurnRecord:
    """Monotonic timestamps (seconds) of one turn's milestones; ``None`` when not reached."""

    session_id: str
    started: float = field(default_factory=time.monotonic)  # request / end of user speech
    speech_end: float | None = None
    stt_done: float | None = None
    words_held_until: float | None = None  # unfinished words went to the LLM (listening.py)
    llm_requested: float | None = None  # the turn asked the responder for its answer
    llm_first_token: float | None = None
    first_chunk: float | None = None  # first speakable piece queued for TTS
    tts_synth_start: float | None = None  # first piece's synthesis started / done
    tts_synth_done: float | None = None
    llm_done: float | None = None
    first_audio: float | None = None  # first TTS audio sent / played
    finished: float | None = None
    barge_in_detected: float | None = None
    ducked: float | None = None  # agent audio paused under a barge-in candidate
    audio_stopped: float | None = None
    interrupted: bool = False
    taken_back: bool = False  # cut unheard by the user's next words, heard again with them
    error: str | None = None
    transcript: str = ""
    speculative_stt: bool = False  # STT started before the end of turn was confirmed
    typed: bool = False  # a typed turn: no speech to text to count
    turn_decided: float | None = None  # the end of the user's turn was decided
    turn_decision: str = ""  # why (end_of_turn.Verdict.reason, or "silence")
    turn_probability: float | None = None  # the end-of-turn model's, when it answered
    playback_gaps_ms: list[float] = field(default_factory=list)  # next piece not ready in time
    early_cuts: int = 0  # pieces cut at a word because the speech would run dry (pacing.py)
    prompt_tokens: int | None = None  # the answer's prompt (all its requests), as reported
    prompt_cached: int | None = None  # ... of which the model had computed before it was sent

    @property
    def prompt_read(self) -> int | None:
        """The answer's prompt tokens the model read once asked (None: none reported)."""
        if self.prompt_tokens is None:
            return None
        return self.prompt_tokens - min(self.prompt_cached or 0, self.prompt_tokens)

    @property
    def outcome(self) -> str:
        """One of ``TURN_OUTCOMES``: how the turn ended."""
        return ("error" if self.error else "taken_back" if self.taken_back
                else "interrupted" if self.interrupted else "completed")

    def ms(self, start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else round((end - start) * 1000, 1)

    def summary(self) -> dict[str, float | str | bool | None]:
        origin = self.speech_end or self.started
        return {
            "stt_ms": self.ms(origin, self.stt_done),
            "llm_ttft_ms": self.ms(self.llm_requested or self.stt_done or origin,
                                   self.llm_first_token),
            "tts_first_audio_ms": self.ms(self.llm_first_token, self.first_audio),
            "first_audio_ms": self.ms(origin, self.first_audio),
            "end_of_turn_ms": self.ms(self.speech_end, self.turn_decided),
            "end_of_turn": self.turn_decision or None,
            "total_ms": self.ms(origin, self.finished),
            "barge_in_ms": self.ms(self.barge_in_detected, self.audio_stopped),
            "overhead_ms": self.overhead_ms(),
            "longest_gap_ms": max(self.playback_gaps_ms, default=0.0),
            "early_cuts": self.early_cuts,
            "prompt_read": self.prompt_read,
            "interrupted": self.interrupted,
            "error": self.error,
        }

    def overhead_ms(self) -> float | None:
        """Time to first audio spent outside model compute: STT done (or unfinished words
        released) -> LLM asked, first piece queued -> its synthesis started, synthesis done ->
        first frame played."""
        parts = [self.ms(self.words_held_until or self.stt_done, self.llm_requested),
                 self.ms(self.first_chunk, self.tts_synth_start),
                 self.ms(self.tts_synth_done, self.first_audio)]
        return None if None in parts else round(sum(parts), 1)

    def as_dict(self) -> dict:
        return asdict(self)


class Metrics:
    """All server metrics in one registry owned by the server (no global registry)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry

        def hist(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, registry=r, buckets=_BUCKETS)

        self.stt = hist("voice_stt_seconds", "speech-to-text time per utterance")
        self.llm_ttft = hist("voice_llm_ttft_seconds", "LLM time to first token")
        self.tts_first_audio = hist("voice_tts_first_audio_seconds",
                                    "LLM first token to first TTS audio")
        self.voice_to_voice = hist("voice_first_audio_seconds",
                                   "end of user speech (or request) to first agent audio")
        self.end_of_turn = Histogram(
            "voice_end_of_turn_seconds", "end of user speech to the decision that the turn is "
            "over, by reason (complete, words complete, sign-off, unfinished words, "
            "unfinished reading, unfinished sentence, unlikely last word, turn model: not "
            "finished, greeting, unsure, fallback, silence)", ["reason"], registry=r,
            buckets=_BUCKETS)
        self.turn_total = hist("voice_turn_seconds", "whole turn duration")
        self.barge_in = hist("voice_barge_in_seconds", "barge-in detected to agent audio stopped")
        self.audio_behind = hist("voice_audio_behind_seconds", "how long callers' audio waited "
                                 "before the server got to it, per 20 ms frame (a server short "
                                 "of CPU falls behind: more cores or fewer sessions)")
        self.turns = Counter(
            "voice_turns_total", "turns by outcome: completed, interrupted (the user cut in "
            "on what they heard), taken_back (the turn ended too soon: the user went on "
            "before a word of its answer was heard, and was answered once for both parts), "
            "error", ["outcome"], registry=r)
        for outcome in TURN_OUTCOMES:
            self.turns.labels(outcome)
        self.taken_back = Counter(
            "voice_turns_taken_back_total", "turns taken back, by the end-of-turn reason that "
            "ended them too soon (the reasons of voice_end_of_turn_seconds): which judge to "
            "tune", ["reason"], registry=r)
        self.prompt_tokens = Counter(
            "voice_llm_prompt_tokens_total", "prompt tokens of the answers, by whether the "
            "model found them computed (cached: the conversation's earlier turns, or read while "
            "the user spoke, llm_prefill) or read them once the user was done (read)",
            ["how"], registry=r)
        self.errors = Counter("voice_errors_total", "errors sent to clients by code", ["code"],
                              registry=r)
        self.sessions = Gauge("voice_sessions_active", "sessions with a live connection",
                              registry=r)
        self.connections = Counter("voice_connections_total", "WebSocket connections accepted",
                                   registry=r)
        self.worker_restarts = Counter(
            "voice_worker_restarts_total", "model worker processes that died and were started "
            "again, by stage (llm, stt, tts, turn)", ["stage"], registry=r)
        for stage in ("llm", "stt", "tts", "turn"):
            self.worker_restarts.labels(stage)
        self.tasks = Gauge("voice_asyncio_tasks", "asyncio tasks alive in the server's event "
                           "loop (a number that keeps growing is a leak)", registry=r)

    def watch_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Count ``loop``'s tasks at each scrape (/metrics is served on that loop)."""
        self.tasks.set_function(lambda: len(asyncio.all_tasks(loop)))

    def worker_restarted(self, stage: str) -> None:
        self.worker_restarts.labels(stage).inc()

    def record_turn(self, rec: TurnRecord) -> None:
        origin = rec.speech_end or rec.started
        pairs = [
            *([] if rec.typed else [(self.stt, origin, rec.stt_done)]),
            (self.llm_ttft, rec.llm_requested or rec.stt_done or origin, rec.llm_first_token),
            (self.tts_first_audio, rec.llm_first_token, rec.first_audio),
            (self.voice_to_voice, origin, rec.first_audio),
            (self.turn_total, origin, rec.finished),
            (self.barge_in, rec.barge_in_detected, rec.audio_stopped),
        ]
        for metric, start, end in pairs:
            if start is not None and end is not None:
                metric.observe(max(0.0, end - start))
        if rec.speech_end is not None and rec.turn_decided is not None:
            self.end_of_turn.labels(rec.turn_decision or "silence").observe(
                max(0.0, rec.turn_decided - rec.speech_end))
        if rec.prompt_tokens is not None and rec.prompt_read is not None:
            self.prompt_tokens.labels("cached").inc(rec.prompt_tokens - rec.prompt_read)
            self.prompt_tokens.labels("read").inc(rec.prompt_read)
        self.turns.labels(rec.outcome).inc()
        if rec.outcome == "taken_back":
            self.taken_back.labels(rec.turn_decision or "silence").inc()

    def taken_back_by_reason(self) -> dict[str, float]:
        """``voice_turns_taken_back_total`` by reason, for the reasons counted so far."""
        return {sample.labels["reason"]: sample.value for metric in self.taken_back.collect()
                for sample in metric.samples if sample.name == "voice_turns_taken_back_total"}

    def render(self) -> bytes:
        return generate_latest(self.registry)
