"""Streaming voice activity detection over 16 kHz mono int16 audio (sans-I/O, webrtcvad).

``feed(pcm)`` returns events: ``start`` once speech is *confirmed* (``min_speech_ms`` of voiced
frames without a long gap), ``end`` (with the utterance audio, pre-roll included) after
``end_silence_ms`` of trailing silence. Short noises below the minimum produce nothing, so they
neither start an utterance nor barge in (docs/turn-taking.md).

Two optional early signals serve latency without changing those decisions:

- ``duck`` after ``duck_ms`` of voiced audio in a not-yet-confirmed candidate, and ``reject`` when
  that candidate dies: the server pauses its outbound audio on ``duck`` (so a real barge-in is
  silent within ~60 ms) and resumes it on ``reject`` (a click or cough costs a short gap, never
  the answer). Only ``start`` cancels the turn.
- ``pause`` after ``spec_silence_ms`` of trailing silence, carrying exactly the audio the ``end``
  event will carry if the user does not resume: speech-to-text can start early (speculative end
  of turn) and its result is reused when ``end`` confirms; ``resume`` when voiced audio follows
  a ``pause`` before ``end`` (the speculation is stale). The owner may end a paused utterance
  early with ``end_now()`` (end_of_turn.py decides when).

While ``agent_speaking`` is set, confirming speech needs ``barge_in_min_speech_ms`` of voiced
audio (an "mm-hm" must not interrupt); ducking makes that longer wait inaudible.

The voice ends where the sound does, not where webrtcvad's "voiced" does: webrtcvad keeps
calling frames voiced for 80-140 ms after speech stops (its hangover; measured on our test
speech, even over digital silence). After speech is confirmed, a frame more than
``quiet_below_db`` below the utterance's median voiced frame is not voice whatever webrtcvad
says (1 % of the speech's level at 40 dB: no sound of speech is that quiet inside a word, and
a noise floor above it leaves webrtcvad's decision as it was). Every utterance keeps
``KEEP_SILENCE_MS`` of audio after its voice (zeros after the pause's silence when the pause
comes sooner: ``pause`` and ``end`` must carry the same audio). The trailing silence that
times ``pause`` and ``end`` counts from the end of the voice too, for an utterance that began
while the agent was silent; one that began over the agent's speech keeps webrtcvad's count: its
audio may carry the agent's echo, whose short gaps between words would otherwise make pauses (a
turn of echoed words ended at the pause after "Stop." in a test of a client without echo
cancellation).

In noise webrtcvad hears voice where there is none: white or pink noise 10 dB below the voice
and it finds no silence after a question, and the noise alone starts utterances
(``bench/noise_vad.py``). The owner may tell the VAD what a speech model (Silero VAD,
speech_model.py) heard in each 32 ms of the audio, in order, once it has (``model_heard``: late
on a busy machine). Once webrtcvad has called ``noisy_after_ms`` of the last 2 s voiced where
the model heard no speech, each chunk judged on webrtcvad's calls on that same audio, the room
is noisy: a frame is then voice only when webrtcvad and the model's latest view both hear
speech, until 2 s pass without such a chunk. In a quiet room webrtcvad decides alone, as
quick as ever (the model hears an onset ~30 ms after it does: a barge-in would stop the agent
that much later).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import webrtcvad

from .audio import STT_RATE, rms
from .speech_model import CHUNK

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["StreamingVAD", "VADEvent", "VADSettings"]

# audio an utterance keeps after the voice: all a speculative pause at 120 ms has, so the pause
# and the end carry the same audio (the shorter the tail, the likelier Whisper's "... the sea.
# Tell me": stt.cut_restart)
KEEP_SILENCE_MS = 120
# the speech model's probability that starts speech, and the one below which speech stops
MODEL_SPEECH_FROM = 0.5
MODEL_SILENCE_BELOW = 0.35
NOISE_WINDOW_MS = 2000  # how far back webrtcvad's voiced frames that the model doubts count
CALLS_KEPT_MS = 5000  # webrtcvad's calls kept for the model's late view (later: not judged)


@dataclass(frozen=True)
class VADSettings:
    frame_ms: int = 20  # webrtcvad accepts 10, 20 or 30 ms
    aggressiveness: int = 2  # 0 (least) .. 3 (most aggressive filtering of non-speech)
    min_speech_ms: int = 200  # voiced audio needed to confirm speech (and to barge in)
    end_silence_ms: int = 500  # trailing silence that ends the utterance
    pre_roll_ms: int = 300  # audio kept before the first voiced frame
    gap_ms: int = 100  # unvoiced run that resets a not-yet-confirmed candidate
    max_utterance_s: float = 30.0
    duck_ms: int = 0  # voiced audio that emits ``duck`` (0: never)
    spec_silence_ms: int = 0  # trailing silence that emits ``pause`` (0: never)
    barge_in_min_speech_ms: int = 0  # confirmation minimum while the agent speaks (0: same)
    quiet_below_db: float = 40.0  # frames this far below the speech's median: not voice (0: off)
    # webrtcvad's voiced frames the speech model doubts, in the last 2 s, that make the room
    # noisy (module docstring; 0: the model is never asked)
    noisy_after_ms: int = 600

    @classmethod
    def from_settings(cls, settings: Settings,
                      overrides: Mapping[str, Any] | None = None) -> VADSettings:
        """The VAD the settings describe (the server's listener and ``bench/noise_vad.py``
        alike); ``overrides``: a playbook stage's ``turn_taking`` values. With a speculative
        pause (``vad_spec_silence_ms``) the VAD waits for the longest end of turn: the
        end-of-turn verdict ends the turn sooner."""
        s = settings
        values = {"aggressiveness": s.vad_aggressiveness, "min_speech_ms": s.vad_min_speech_ms,
                  "end_silence_ms": s.vad_end_silence_ms, "pre_roll_ms": s.vad_pre_roll_ms}
        values.update({k: v for k, v in (overrides or {}).items()
                       if k in values and v is not None})
        if s.vad_spec_silence_ms:
            values["end_silence_ms"] = max(values["end_silence_ms"], s.end_of_turn_max_ms)
        return cls(max_utterance_s=s.max_audio_seconds, duck_ms=s.vad_duck_ms,
                   barge_in_min_speech_ms=s.vad_barge_in_min_speech_ms,
                   spec_silence_ms=s.vad_spec_silence_ms, quiet_below_db=s.vad_quiet_below_db,
                   noisy_after_ms=s.vad_noisy_after_ms, **values)

    def __post_init__(self) -> None:
        if self.frame_ms not in (10, 20, 30):
            raise ValueError("frame_ms must be 10, 20 or 30")
        if not 0 <= self.aggressiveness <= 3:
            raise ValueError("aggressiveness must be 0..3")


@dataclass(frozen=True)
class VADEvent:
    kind: str  # "start" | "end" | "duck" | "reject" | "pause" | "resume"
    at_s: float  # stream time of the event (seconds of audio fed so far)
    pcm: np.ndarray | None = None  # the utterance, on "end" (and the would-be one on "pause")
    onset_s: float | None = None  # stream time of the first voiced frame, on "start"
    silence_ms: int = 0  # the utterance's trailing silence, on "end"


class StreamingVAD:
    def __init__(self, settings: VADSettings | None = None) -> None:
        self.settings = s = settings or VADSettings()
        self._vad = webrtcvad.Vad(s.aggressiveness)
        self._frame = STT_RATE * s.frame_ms // 1000
        # trailing silent frames that emit ``pause`` (0: never), and those the utterance keeps
        self._pause_frames = max(1, s.spec_silence_ms // s.frame_ms) if s.spec_silence_ms else 0
        keep = KEEP_SILENCE_MS // s.frame_ms
        self._tail_frames = min(keep, self._pause_frames or keep)
        self._tail_zeros = np.zeros((keep - self._tail_frames) * self._frame, dtype=np.int16)
        self._pending = np.zeros(0, dtype=np.int16)
        self._pre = collections.deque(maxlen=max(1, s.pre_roll_ms // s.frame_ms))
        self._candidate: list[np.ndarray] = []
        self._voiced_frames = 0
        self._gap_frames = 0
        self._speech: list[np.ndarray] = []
        self._levels: list[float] = []  # RMS of the utterance's voice frames
        self._quiet_ratio = 10 ** (-s.quiet_below_db / 20) if s.quiet_below_db else 0.0
        self._voice_frames = 0  # frames of the utterance up to the end of its voice so far
        self._quiet_tail = False  # silence counts from the end of the voice (module docstring)
        self._silence_frames = 0
        self._frames_seen = 0
        self._onset_frame = 0
        self._ducked = False
        self._paused = False
        self._model_speech: bool | None = None  # what the speech model heard last (None: none)
        self._model_chunks = 0  # the chunks it has been told of
        self._calls: collections.deque[bool] = collections.deque(  # webrtcvad's, by frame
            maxlen=CALLS_KEPT_MS // s.frame_ms)
        self._doubted: collections.deque[bool] = collections.deque(  # by chunk
            maxlen=NOISE_WINDOW_MS * STT_RATE // 1000 // CHUNK)
        self.noisy = False  # frames are voice only when the model hears speech too
        self.speaking = False
        self.agent_speaking = False  # set by the owner: raises the confirmation minimum

    @property
    def time_s(self) -> float:
        return self._frames_seen * self.settings.frame_ms / 1000

    @property
    def paused(self) -> bool:
        """A ``pause`` was emitted and no voiced frame has followed it yet."""
        return self._paused

    @property
    def silence_ms(self) -> int:
        """Trailing silence of the utterance in progress."""
        return self._silence_frames * self.settings.frame_ms if self.speaking else 0

    def end_now(self) -> VADEvent:
        """End the paused utterance before ``end_silence_ms`` (the end-of-turn decision came
        first): the same ``end`` event, with the same audio as its ``pause``."""
        if not self._paused:
            raise RuntimeError("end_now() needs a paused utterance")
        return self._end()

    def _end(self) -> VADEvent:
        silence_ms = self._silence_frames * self.settings.frame_ms
        utterance = self._trimmed()
        self._reset()
        return VADEvent("end", self.time_s, pcm=utterance, silence_ms=silence_ms)

    @property
    def utterance_samples(self) -> int:
        """Length of the utterance in progress (without building it)."""
        return len(self._speech) * self._frame

    def utterance_so_far(self) -> np.ndarray:
        """The audio of the utterance in progress (for interim transcripts)."""
        return np.concatenate(self._speech) if self._speech else np.zeros(0, dtype=np.int16)

    def forget_before(self, samples: int) -> None:
        """Drop the utterance's audio before its first ``samples`` (whole frames): what the
        owner knows is not the speaker's (the agent's echo before the user spoke over it)."""
        drop = min(samples // self._frame, len(self._speech))
        if drop > 0 and self.speaking:
            del self._speech[:drop]
            self._voice_frames = max(0, self._voice_frames - drop)

    def replace_start(self, pcm: np.ndarray) -> None:
        """Put ``pcm`` (int16, from ``utterance_so_far``) in place of the utterance's first
        whole frames: the same audio cleaned by the owner (the agent's echo taken out), so
        that the turn's transcript hears what the barge-in was judged on."""
        if not self.speaking:
            return
        for i in range(min(len(pcm) // self._frame, len(self._speech))):
            self._speech[i] = pcm[i * self._frame:(i + 1) * self._frame]

    def voice_so_far(self) -> np.ndarray:
        """The voice heard last: the utterance in progress, or the candidate not yet confirmed
        with the pre-roll before it (what a barge-in is judged on before it counts)."""
        frames = self._speech if self.speaking else [*self._pre, *self._candidate]
        return np.concatenate(frames) if frames else np.zeros(0, dtype=np.int16)

    def model_heard(self, probability: float | None) -> None:
        """What the speech model heard in the next ``CHUNK`` of the audio, in order from the
        stream's start (the probability of speech; None: not asked, as for quiet audio, or it
        failed). It may come late: the room's noise is judged on webrtcvad's calls on that same
        chunk, so a late view never makes a quiet room noisy."""
        chunk, self._model_chunks = self._model_chunks, self._model_chunks + 1
        if probability is None:
            self._model_speech = None
            self.noisy = False
            self._doubted.clear()
            return
        if probability >= MODEL_SPEECH_FROM:
            self._model_speech = True
        elif probability < MODEL_SILENCE_BELOW or self._model_speech is None:
            self._model_speech = False
        if not self.settings.noisy_after_ms:
            return
        # webrtcvad's calls on the frames that begin in this chunk, if still logged
        first, last = (-(-edge * CHUNK // self._frame) for edge in (chunk, chunk + 1))
        base = self._frames_seen - len(self._calls)
        voiced = any(self._calls[f - base] for f in range(max(first, base), last)
                     if f - base < len(self._calls))
        if not self._model_speech:  # speech hides the noise: the room is judged without it
            self._doubted.append(voiced)
        doubted_ms = sum(self._doubted) * CHUNK * 1000 // STT_RATE
        if doubted_ms >= self.settings.noisy_after_ms:
            self.noisy = True
        elif not doubted_ms:
            self.noisy = False

    def _heard(self, voiced: bool) -> bool:
        """webrtcvad's call on a frame, and in a noisy room the speech model's latest too."""
        self._calls.append(voiced)
        if self._model_speech is None or not self.noisy:
            return voiced
        return voiced and self._model_speech

    def feed(self, pcm: np.ndarray) -> list[VADEvent]:
        data = np.concatenate([self._pending, np.asarray(pcm, dtype=np.int16)])
        usable = len(data) - len(data) % self._frame
        self._pending = data[usable:]
        events: list[VADEvent] = []
        for start in range(0, usable, self._frame):
            event = self._step(data[start:start + self._frame])
            if event is not None:
                events.append(event)
        return events

    def _step(self, frame: np.ndarray) -> VADEvent | None:
        s = self.settings
        self._frames_seen += 1
        voiced = self._heard(self._vad.is_speech(frame.tobytes(), STT_RATE))
        if self.speaking:
            self._speech.append(frame)
            voice = voiced and self._is_voice(frame)
            if voice:
                self._voice_frames = len(self._speech)
            if self._quiet_tail:
                voiced = voice
            self._silence_frames = 0 if voiced else self._silence_frames + 1
            if voiced and self._paused:
                self._paused = False
                return VADEvent("resume", self.time_s)
            too_long = len(self._speech) * s.frame_ms / 1000 >= s.max_utterance_s
            if self._silence_frames * s.frame_ms >= s.end_silence_ms or too_long:
                return self._end()
            if self._pause_frames and self._silence_frames == self._pause_frames:
                self._paused = True
                return VADEvent("pause", self.time_s, pcm=self._trimmed())
            return None
        if voiced:
            if not self._candidate:
                self._onset_frame = self._frames_seen - 1
            self._candidate.append(frame)
            self._voiced_frames += 1
            self._gap_frames = 0
            needed = s.min_speech_ms
            if self.agent_speaking and s.barge_in_min_speech_ms:
                needed = max(needed, s.barge_in_min_speech_ms)
            if self._voiced_frames * s.frame_ms >= needed:
                self.speaking = True
                self._ducked = False
                self._speech = [*self._pre, *self._candidate]
                self._voice_frames = len(self._speech)
                self._levels = [rms(f) for f in self._candidate]
                self._quiet_tail = bool(self._quiet_ratio) and not self.agent_speaking
                self._pre.clear()
                self._candidate = []
                return VADEvent("start", self.time_s,
                                onset_s=self._onset_frame * s.frame_ms / 1000)
            if s.duck_ms and not self._ducked and self._voiced_frames * s.frame_ms >= s.duck_ms:
                self._ducked = True
                return VADEvent("duck", self.time_s,
                                onset_s=self._onset_frame * s.frame_ms / 1000)
            return None
        if self._candidate:
            self._candidate.append(frame)
            self._gap_frames += 1
            if self._gap_frames * s.frame_ms >= s.gap_ms:
                for old in self._candidate:
                    self._pre.append(old)
                self._candidate = []
                self._voiced_frames = 0
                self._gap_frames = 0
                if self._ducked:
                    self._ducked = False
                    return VADEvent("reject", self.time_s)
            return None
        self._pre.append(frame)
        return None

    def _is_voice(self, frame: np.ndarray) -> bool:
        """A frame webrtcvad calls voiced: is it loud enough to be voice (module docstring)?
        Only frames judged voice count towards the speech's level."""
        if not self._quiet_ratio:
            return True
        level = rms(frame)
        if level < float(np.median(self._levels)) * self._quiet_ratio:
            return False
        self._levels.append(level)
        return True

    def _trimmed(self) -> np.ndarray:
        """The utterance with ``KEEP_SILENCE_MS`` after its voice, the same at ``pause`` and
        ``end``: the audio heard after the voice up to the pause's silence (``spec_silence_ms``,
        when shorter), then digital silence. Speech to text hears a pause at 60 ms as it hears
        one at 120 ms (it pads what it is given with zeros anyway; module docstring)."""
        utterance = np.concatenate(self._speech[:self._voice_frames + self._tail_frames])
        if not len(self._tail_zeros):
            return utterance
        return np.concatenate([utterance, self._tail_zeros])

    def _reset(self) -> None:
        self.speaking = False
        self._paused = False
        self._speech = []
        self._levels = []
        self._voice_frames = 0
        self._quiet_tail = False
        self._silence_frames = 0
        self._candidate = []
        self._voiced_frames = 0
        self._gap_frames = 0
