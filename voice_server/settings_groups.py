"""The fields of ``config.Settings``, in groups (each its own model; ``Settings`` inherits them
all, so every setting keeps its flat name: ``--llm-threads``, ``VOICE_SERVER_LLM_THREADS``).

Nothing here reads the environment: ``config.py`` does. A validator of one group's fields lives
with them; one that joins groups lives in ``Settings``.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

__all__ = ["DEFAULT_APOLOGY", "DEFAULT_FALLBACK", "DEFAULT_ORIGINS", "DEFAULT_SYSTEM_PROMPT",
           "EdgeSettings", "ModelSettings", "ServiceSettings", "VoiceSettings"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a friendly voice assistant. Answer in one or two short, plain sentences."
)
DEFAULT_FALLBACK = "Sorry, I missed that. Could you say it again?"  # said for an empty answer
DEFAULT_APOLOGY = "Sorry, I can't answer right now. Please try again in a moment."  # LLM failed
DEFAULT_ORIGINS = ("http://localhost", "http://127.0.0.1", "null")


class EdgeSettings(BaseModel):
    """Where clients connect, what they may send, and who they must be."""

    # network edge
    host: str = Field("127.0.0.1", description="address the server listens on")
    port: int = Field(8787, ge=0, le=65535, description="TCP port (0 picks a free one)")
    ice_servers: list[dict[str, Any]] = Field(
        default_factory=list,
        description="STUN/TURN servers as a JSON list of RTCIceServer objects, sent in ready")
    ice_host_addresses: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated local addresses ICE may gather host candidates on")
    ice_candidate_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated networks (CIDR) whose client ICE "
        "candidates are used besides public addresses, e.g. 192.168.0.0/16 on a LAN or "
        "127.0.0.1 in tests; private, loopback and link-local candidates are dropped otherwise")
    ice_candidate_deny: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated networks (CIDR) whose client ICE "
        "candidates are never used, even when public")
    ice_candidate_min_port: int = Field(1024, ge=0, le=65535, description="client ICE "
                                        "candidates on lower ports are dropped")
    rtc_jitter_prefetch_frames: int = Field(
        1, ge=0, le=15, description="inbound audio frames (20 ms each) the WebRTC jitter buffer "
        "holds before decoding (aiortc's own is 4): each one delays hearing the user, barge-in "
        "included, by 20 ms; aiortc's buffer waits for a late packet whatever its depth, and "
        "the audio feeds the VAD, not a speaker, so 1 loses nothing")
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_ORIGINS),
        description="comma-separated browser origins allowed to connect besides the page's "
                    "own ('*' for any; 'null', for file:// pages and sandboxed iframes, only "
                    "when listed); a port-less entry allows every port of that host; empty: "
                    "the default")
    idle_timeout_s: float = Field(45.0, gt=0, description="close a socket silent this long")
    session_ttl_s: float = Field(1800.0, gt=0, description="keep a session this long after "
                                                           "its last connection ends")
    empty_session_ttl_s: float = Field(60.0, gt=0, description="keep a session in which "
                                       "nothing was said yet this long after its last use")
    max_message_bytes: int = Field(0, ge=0, description="largest accepted WebSocket text "
                                   "message (0: room for max_audio_seconds of 16 kHz mono WAV "
                                   "plus max_attachment_bytes, in base64: 6.8 MB by default)")
    max_audio_seconds: float = Field(60.0, gt=0, description="longest accepted utterance")
    max_attachment_bytes: int = Field(4 * 1024 * 1024, ge=0, description="largest total size "
                                      "of one turn's images (as sent, base64)")
    input_budget_bytes: int = Field(256 * 1024 * 1024, ge=1024 * 1024, description="client "
                                    "input (audio, images) held at once by all connections; "
                                    "over it, new input gets RATE_LIMITED")

    max_sessions: int = Field(500, ge=1, description="most live connections on this instance")
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated addresses/CIDRs of reverse proxies "
        "whose X-Forwarded-For names the client (per-IP limits, logs); others are ignored")
    max_sessions_per_ip: int = Field(50, ge=1, description="most live connections from one "
                                     "client address")
    max_messages_per_s: float = Field(50.0, gt=0, description="sustained client message rate "
                                      "per connection (RATE_LIMITED above it)")
    message_burst: int = Field(200, ge=1, description="messages a connection may send at once "
                               "before the rate limit applies")
    send_timeout_s: float = Field(15.0, gt=0, description="close a connection whose client "
                                  "does not read a message for this long")
    shutdown_grace_s: float = Field(20.0, ge=0, description="on SIGTERM, let running turns "
                                    "finish this long before closing sockets")

    # scale out and auth
    session_store: str = Field("memory", description="'memory' or redis://HOST:PORT/DB to share "
                               "sessions between instances")
    session_lease_s: float = Field(15.0, gt=0, description="a session's ownership lease by one "
                                   "instance (renewed while connected)")
    session_heartbeat_s: float = Field(2.0, gt=0, description="an instance silent in Redis "
                                       "this long is dead: its sessions are taken over at once "
                                       "(it beats four times as often)")
    session_claim_wait_s: float = Field(8.0, gt=0, description="how long a reconnect waits for "
                                        "the instance owning the session to let it go")
    auth_secret: str | None = Field(None, description="HMAC secret; when set every connection "
                                    "must present a token (?token= or an auth message)")
    turn_secret: str | None = Field(None, description="coturn static-auth-secret: time-limited "
                                    "TURN credentials are added to ready.iceServers")
    turn_urls: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated turn: URLs for the TURN credentials")
    auth_timeout_s: float = Field(10.0, gt=0, description="wait this long for the auth message "
                                  "when no ?token= was given")
    turn_ttl_s: int = Field(3600, ge=60, description="lifetime of TURN credentials")

    @field_validator("ice_host_addresses", "allowed_origins", "turn_urls", "trusted_proxies",
                     "ice_candidate_allow", "ice_candidate_deny", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip()
            if value.startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _size_messages(self) -> Self:
        """``max_message_bytes`` 0: sized from what a message may carry."""
        if self.max_message_bytes == 0:
            wav = 44 + int(self.max_audio_seconds * 16_000) * 2
            self.max_message_bytes = 4 * -(-wav // 3) + self.max_attachment_bytes + 64 * 1024
        return self

    @field_validator("allowed_origins")
    @classmethod
    def _default_when_empty(cls, value: list[str]) -> list[str]:
        """An empty setting (compose's ``${ALLOWED_ORIGINS:-}``) means the default."""
        return value or list(DEFAULT_ORIGINS)

    @field_validator("trusted_proxies", "ice_candidate_allow", "ice_candidate_deny")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            ipaddress.ip_network(entry, strict=False)  # ValueError -> a clear settings error
        return value

    @field_validator("session_store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        if value != "memory" and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("session_store is 'memory' or a redis://HOST:PORT/DB URL")
        return value


class VoiceSettings(BaseModel):
    """Hearing and speaking: turn taking, speech to text, text to speech."""

    # turn taking (WebRTC audio)
    vad_aggressiveness: int = Field(2, ge=0, le=3, description="webrtcvad mode, 0..3")
    vad_min_speech_ms: int = Field(200, ge=20, description="voiced audio that confirms speech "
                                   "(and barges in)")
    vad_end_silence_ms: int = Field(500, ge=60, description="silence that ends an utterance "
                                    "when the end-of-turn judges cannot tell "
                                    "(see end_of_turn_model)")
    vad_pre_roll_ms: int = Field(300, ge=0, description="audio kept before speech starts")
    vad_quiet_below_db: float = Field(40.0, ge=0, le=90, description="after speech, a frame "
                                      "this many dB below the speech's median level is not "
                                      "voice whatever webrtcvad says (its hangover called "
                                      "~100 ms after the voice voiced; 0: off)")
    vad_noisy_after_ms: int = Field(600, ge=0, le=2000, description="webrtcvad's voiced audio "
                                    "in the last 2 s that the speech model (Silero VAD, in the "
                                    "end-of-turn model's worker) hears as no speech, after "
                                    "which only audio both hear as speech is voice: a noisy "
                                    "room (0: webrtcvad alone)")
    vad_duck_ms: int = Field(20, ge=0, description="voiced audio during agent speech that pauses "
                             "the agent's audio until speech is confirmed or rejected (0: off)")
    vad_barge_in_min_speech_ms: int = Field(400, ge=0, description="voiced audio that confirms "
                                            "a barge-in while the agent speaks (0: as "
                                            "vad_min_speech_ms)")
    vad_spec_silence_ms: int = Field(60, ge=0, description="silence after which the answer "
                                     "(speech-to-text, then the LLM) starts speculatively, "
                                     "held until the end of turn confirms it (0: off); 60 ms "
                                     "answers ~60 ms sooner than 120 (bench/voice_latency.py); "
                                     "below 120 ms the utterance is padded with digital "
                                     "silence to the 120 ms speech to text hears after it")
    end_of_turn_model: str = Field(
        "smart-turn", description="end-of-turn model on the audio: 'smart-turn' (bundled Smart "
        "Turn v3.2), a path to such an ONNX file, or 'off' (the transcript's words alone); "
        "needs vad_spec_silence_ms > 0")
    end_of_turn_commit_ms: int = Field(200, ge=60, description="silence that ends a turn the "
                                       "model and the words both judge complete")
    end_of_turn_max_ms: int = Field(1600, ge=200, le=10_000, description="silence that ends a "
                                    "turn judged unfinished (a pause to think)")
    llm_unfinished_after_ms: int = Field(1000, ge=0, description="silence after which the "
                                         "held answer to words that stop mid-sentence ('I'd "
                                         "like to book a table for') asks the LLM; such a turn "
                                         "waits up to end_of_turn_max_ms, so a pause to think "
                                         "costs no LLM request (0: at once, like any other)")
    llm_prefill: bool = Field(True, description="before the user is done, the embedded LLM "
                              "reads its prompt up to their words so far (the history once "
                              "the last answer is over, then an interim transcript's words "
                              "once 8 more are heard; a playbook turn's first request), so "
                              "the answer reads only the rest once they are done")
    end_of_turn_complete_from: float = Field(0.5, ge=0, le=1, description="turn model "
                                             "probability from which a turn is complete")
    end_of_turn_unfinished_below: float = Field(0.03, ge=0, le=1, description="turn model "
                                                "probability below which it is unfinished")
    end_of_turn_sentence_end_below: float = Field(0.005, ge=0, le=1, description="a turn "
                                                  "whose words a small language model "
                                                  "would go on with ('Who painted the "
                                                  "Mona') waits as unfinished when its "
                                                  "chance of a sentence end is below this "
                                                  "(pipeline/readings.py; English "
                                                  "only); 0: off")
    end_of_turn_words_complete_from: float = Field(0.2, ge=0, le=1, description="a turn the "
                                                   "turn model is unsure of (between "
                                                   "end_of_turn_unfinished_below and "
                                                   "end_of_turn_complete_from) ends as complete "
                                                   "when that language model gives its words' "
                                                   "sentence end at least this chance (1: off)")
    end_of_turn_last_word_below: float = Field(-14.0, ge=-1000, le=0, description="a turn "
                                               "whose last word that language model finds "
                                               "this unlikely after the others (natural "
                                               "log-probability) waits: speech to text "
                                               "invents a last word for a cut-off sentence "
                                               "('What is the capital done?'); -1000: off")
    barge_in_echo_share: float = Field(0.5, gt=0, le=1, description="speech over the agent "
                                       "of which at least this share of the energy is the "
                                       "agent's own audio played back (delayed, scaled) is its "
                                       "echo and interrupts nothing")
    barge_in_judge: bool = Field(True, description="speech over the agent pauses it and is "
                                 "judged by its words before it cancels the answer: an "
                                 "acknowledgement, noise or echo of the agent resumes it "
                                 "(off: any confirmed speech cancels at once)")
    interim_transcripts: bool = Field(True, description="send isFinal=false transcripts while "
                                      "the user speaks")

    # speech to text
    stt_model: str | None = Field(None, description="faster-whisper model directory or name "
                                  "(default: bundled Whisper tiny.en)")
    stt_compute_type: str = Field("int8", description="CTranslate2 compute type")
    stt_beam_size: int = Field(5, ge=1, le=10, description="Whisper beam size: 5 hears a few "
                               "more words right than 1 for ~70 ms more CPU per utterance "
                               "(bench/quality.py)")
    stt_rescore_weight: float = Field(0.2, ge=0, le=5, description="weight of a small "
                                      "language model's judgement when Whisper's readings "
                                      "nearly tie ('leap here' or 'leap year'; "
                                      "pipeline/readings.py); 0: off")
    stt_rescore_model: str | None = Field(None, description="GGUF language model that "
                                          "rescores readings (default: the bundled "
                                          "SmolLM2-135M)")
    stt_language: str | None = Field("en", description="spoken language (None: detect)")
    stt_threads: int = Field(0, ge=0, description="CPU threads for STT (0: 2, or the CPUs "
                             "this process may use when fewer)")
    stt_window_s: float = Field(8.0, ge=0, le=30, description="encode an utterance in a window "
                                "this long (or its length + 2 s) instead of Whisper's 30 s: "
                                "about 3x faster on short turns (0: always 30 s)")

    # text to speech
    tts_voice: str | None = Field(None, description="Piper .onnx voice path "
                                  "(default: bundled en_US-joe-medium)")
    tts_threads: int = Field(1, ge=1, description="CPU threads for one TTS synthesis")
    tts_first_piece_words: int = Field(2, ge=0, description="the first spoken piece of an "
                                       "answer ends after this many words when no clause "
                                       "ends sooner (0: at the first sentence end); 2 starts "
                                       "speech ~80 ms sooner than 3, 3 ~60 ms sooner than 4 "
                                       "(bench/voice_latency.py, with tts_keep_speaking)")
    tts_second_piece_words: int = Field(8, ge=0, description="the second spoken piece ends "
                                        "after this many words when no clause ends sooner (0: "
                                        "at its sentence end): no gap after a short first piece "
                                        "while a long sentence is written and synthesized")
    tts_keep_speaking: bool = Field(True, description="when the LLM writes an answer "
                                    "slowly, speak the whole words written so far before "
                                    "the queued audio runs out (pieces of a few words) instead "
                                    "of falling silent until the next clause or sentence")
    tts_max_piece_chars: int = Field(120, ge=20, le=2000, description="no text longer than this "
                                     "goes to TTS at once (a longer sentence is cut at a "
                                     "clause): Piper needs ~1 MB per character while it "
                                     "speaks a piece, and a shorter piece is ready sooner")


class ModelSettings(BaseModel):
    """The language model and what the agent says with it."""

    # language model
    llm_provider: Literal["local", "openai_compat"] = Field(
        "local", description="'local' (embedded GGUF) or 'openai_compat' (any OpenAI-compatible "
                             "endpoint)")
    llm_base_url: str | None = Field(None, description="base URL of the OpenAI-compatible API")
    llm_api_key: str | None = Field(None, description="API key for the endpoint")
    llm_model: str | None = Field(None, description="model name for the endpoint")
    llm_profile: Literal["tiny", "small", "medium"] = Field(
        "medium", description="bundled model of the local provider: 'tiny' (SmolLM2-135M, "
                            "fastest, often wrong), 'small' (Qwen2.5-Coder-0.5B) or 'medium' "
                            "(Qwen2.5-Coder-1.5B, right most often, slowest)")
    llm_model_path: str | None = Field(None, description="GGUF file for the local provider "
                                       "(default: the llm_profile's bundled model)")
    llm_vision: bool = Field(False, description="the endpoint's model accepts images")
    llm_timeout_s: float = Field(30.0, gt=0, description="LLM request timeout")
    llm_first_token_timeout_s: float = Field(10.0, gt=0, description="an OpenAI-compatible "
                                             "endpoint that sends no answer this long fails "
                                             "the turn (LLM_TIMEOUT and a spoken apology)")
    llm_max_tokens: int = Field(160, ge=1, description="longest spoken answer in tokens")
    llm_temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature (0: "
                                   "the likeliest word each time, the most accurate answers "
                                   "of the bundled models in bench/quality.py)")
    llm_cpu_kernels: str = Field("auto", min_length=1, description="llama.cpp CPU kernels of "
                                 "the local model: 'auto' (the fastest build this CPU runs: "
                                 "AVX-512, or arm64's dot product, where it has it), "
                                 "'portable' (the x86-64-v3/armv8 baseline; also to use your "
                                 "own LLAMA_CPP_LIB_PATH) or an installed build's name "
                                 "('skylakex', 'icelake'; 'armv8.2_2', 'armv8.6_1')")
    llm_threads: int = Field(0, ge=0, description="CPU threads of the local model while no "
                             "STT/TTS runs (one while they do; 0: 2, or the CPUs this "
                             "process may use when fewer)")
    llm_slots: int = Field(4, ge=1, le=64, description="answers the local model serves at once, "
                           "each keeping its conversation's prompt cached")
    llm_context_tokens: int = Field(8192, ge=512, le=131072, description="the local model's "
                                    "context, shared by its slots: any one prompt and answer "
                                    "may use all of it (capped at the model's own maximum)")
    system_prompt: str = Field(DEFAULT_SYSTEM_PROMPT, description="system prompt of the agent")
    answer_max_chars: int = Field(600, ge=40, description="a spoken answer ends at the first "
                                  "sentence end after this many characters")
    empty_answer_text: str = Field(DEFAULT_FALLBACK, min_length=1, description="said instead "
                                   "of an answer with no words in it")
    llm_failure_text: str = Field(DEFAULT_APOLOGY, min_length=1, description="said when the LLM "
                                  "fails or times out before its first word (after the error)")
    max_history_messages: int = Field(40, ge=2, description="history messages sent to the "
                                      "LLM; once outgrown, the oldest are dropped until half "
                                      "is used, so the prompt's cached start holds for the "
                                      "next turns")
    max_history_chars: int = Field(16_000, ge=200, description="characters of history sent to "
                                   "the LLM, the newest kept (fits the local model's context)")

    @field_validator("llm_base_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value


class ServiceSettings(BaseModel):
    """Playbooks, sidecars, phone calls and the process itself."""

    # playbooks
    playbooks_dir: str | None = Field(None, description="folder of YAML playbooks, hot-reloaded "
                                      "(default: the bundled playbooks/ folder)")
    default_playbook: str | None = Field(None, description="playbook id used when a connection "
                                         "names none (?playbook=ID on the WebSocket URL)")
    warm_playbooks: bool = Field(True, description="have the embedded model compute the served "
                                 "playbooks' stage prompts while no call is live (after start, "
                                 "named ones first), so a stage's first turn is as quick as the "
                                 "next")

    # sidecars started beside the voice server, sharing its LLM layer
    sidecars: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description='text sidecars to start with the server, as JSON: {"broker": {"port": 8790, '
                    '"http_port": 8791}, "host": {"port": 8792}, "caller": {"port": 4037, '
                    '"token": "..."}, "prompt": {"port": 53051}} (docs/sidecar-*.md)')

    # phone calls (Twilio Media Streams; docs/phone.md)
    phone: bool = Field(False, description="answer phone calls: the Twilio voice webhook "
                        "/twilio/voice and media stream /twilio/media on the server's port")
    phone_port: int | None = Field(None, ge=0, le=65535, description="also serve the phone "
                                   "endpoints on this port of their own (turns phone on)")
    phone_public_url: str | None = Field(None, description="the public https:// URL Twilio "
                                         "reaches the phone endpoints at (a tunnel or proxy); "
                                         "default: the webhook request's Host and "
                                         "X-Forwarded-Proto")
    twilio_auth_token: str | None = Field(None, description="the Twilio account's auth token: "
                                          "when set, requests without a valid "
                                          "X-Twilio-Signature are refused")
    phone_playbook: str | None = Field(None, description="playbook for phone calls (default: "
                                       "default_playbook; ?playbook=ID on the webhook URL "
                                       "wins)")

    # runtime
    compute_workers: int = Field(0, ge=0, description="STT and TTS jobs run at once (the local "
                                 "LLM has its own thread); more wait, the urgent ones first "
                                 "(0: 2, or the CPUs this process may use when fewer)")
    preload_models: bool = Field(True, description="load and warm models at start")
    log_level: str = Field("INFO", description="logging level: DEBUG, INFO, WARNING, ERROR "
                           "or CRITICAL")

    @field_validator("log_level")
    @classmethod
    def _level_name(cls, value: str) -> str:
        if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"{value!r} is not a logging level: DEBUG, INFO, WARNING, ERROR "
                             "or CRITICAL")
        return value.upper()
