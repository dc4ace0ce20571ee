"""Turn-taking for one session's inbound voice, whichever transport carries it (WebRTC today,
a phone line next): 16 kHz PCM in; speech-start/end, transcripts, utterances and barge-ins out to
the session's ``Conversation``.

- **End of turn** (end_of_turn.py): at the first short pause (``vad_spec_silence_ms``) the answer
  starts speculatively (speech to text, then the LLM; its messages and audio held), and the turn
  model and the transcript judge whether the user is done. The turn ends after the silence the
  verdict asks for: about 200 ms when both say complete, up to ``end_of_turn_max_ms`` when the
  user is mid-sentence. Speech that resumes first drops the held answer unheard. Speech that
  cuts the answer before a word of it was heard (the turn ended too soon) takes the utterance
  back: it is heard again joined to the new words, as one turn (``Conversation.cut_by_user``).
- **Echo** (barge_in_judge.py): voice over the agent that is mostly its own audio played back
  (measured against what the transport played, echo.py) is neither a barge-in nor a turn, and
  does not pause the agent; it is measured again every 200 ms, so the user talking through it
  counts.
- **Barge-in** (barge_in_judge.py): voice onset while the agent talks pauses its audio at once;
  speech that counts is judged by its words before it cancels anything, and an
  acknowledgement, a noise or the agent's echo resume the agent where it paused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..metrics import Metrics, TurnRecord
from ..pipeline.audio import STT_RATE
from ..pipeline.end_of_turn import Ending, EndOfTurnPolicy, Verdict, signs_off
from ..pipeline.speech import HeldOutput, SpeechOutput
from ..pipeline.stt import Hearing, STTError
from ..pipeline.vad import StreamingVAD, VADEvent, VADSettings
from ..protocol import Message, SpeechEnd, SpeechStart, Transcript
from .barge_in_judge import BargeInJudge, Playback
from .speech_gate import SpeechGate, SpeechModel

if TYPE_CHECKING:
    from ..config import Settings
    from ..pipeline.turn import Turn
    from .conversation import Conversation, Transcriber

__all__ = ["Listener", "Playback", "TurnModel"]

log = logging.getLogger(__name__)

INTERIM_AFTER_S = 1.5
INTERIM_EVERY_S = 1.0
# an interim transcript has the LLM read ahead only this many more words than it has read (the
# model's weights then push Whisper's out of the CPU's cache: the pause's transcript took ~40 ms
# longer, about what reading 4-5 words ahead saves; docs/performance.md)
PREFILL_MIN_WORDS = 8
# the silence put between an utterance taken back and the words that cut it: a pause Whisper
# reads inside a sentence (the pcm already holds ~60 ms after the one and the VAD's pre-roll
# before the other)
JOIN_GAP_S = 0.1


class TurnModel(Protocol):
    async def complete(self, pcm: np.ndarray) -> float: ...


@dataclass
class _Speculation:
    pcm: np.ndarray  # the utterance as it was at the pause (``end`` must carry the same)
    output: HeldOutput
    record: TurnRecord
    verdict: asyncio.Task[Verdict]
    ask: asyncio.Event  # the LLM may be asked (words that stop mid-sentence wait for it)


@dataclass(eq=False, kw_only=True)
class Listener:
    settings: Settings
    conversation: Callable[[], Conversation]
    send: Callable[[Message], Awaitable[None]]
    stt: Transcriber
    turn_model: TurnModel | None
    playback: Playback
    speech_output: Callable[[], SpeechOutput]
    busy: Callable[[], bool]  # the compute pool is saturated: skip best-effort work
    # the LLM runs on this machine's cores: it is asked once the words are judged, not beside
    llm_shares_cpu: bool = False
    # hears speech where webrtcvad hears noise too (vad.py ``model_heard``; None: webrtcvad alone)
    speech_model: SpeechModel | None = None
    metrics: Metrics | None = None  # counts how long each piece of audio waited (``feed``)

    def __post_init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._interim: asyncio.Task[None] | None = None
        self._prefill: asyncio.Task[None] | None = None
        self._prefilled_words = 0  # of the utterance in progress
        self._read_ahead_due = False  # an answer is under way: once it is over, read ahead
        self._record: TurnRecord | None = None
        self._held: _Speculation | None = None  # an answer started on a short pause
        self._before: np.ndarray | None = None  # an utterance taken back, heard again joined
        self._barge_ins = BargeInJudge(
            settings=self.settings, conversation=self.conversation, stt=self.stt,
            playback=self.playback, vad=lambda: self._vad, spawn=self._spawn,
            user_speaks=self._user_speaks, behind=self._behind)
        self._arrived: float | None = None
        self._last_interim = 0.0
        self._closed = False
        self._policy = EndOfTurnPolicy()
        self._vad = StreamingVAD(self.vad_settings())
        self._gate = SpeechGate(self.speech_model, self._spawn) if \
            self.speech_model is not None and self.settings.vad_noisy_after_ms else None

    # ---- settings ------------------------------------------------------------------------
    def vad_settings(self) -> VADSettings:
        """The VAD's settings for the current playbook stage (``VADSettings.from_settings``),
        and the end-of-turn policy that goes with them."""
        s = self.settings
        overrides = self.conversation().turn_taking()
        fallback = overrides.get("end_silence_ms")
        self._policy = EndOfTurnPolicy(
            commit_ms=s.end_of_turn_commit_ms, max_ms=s.end_of_turn_max_ms,
            fallback_ms=s.vad_end_silence_ms if fallback is None else fallback,
            complete_from=s.end_of_turn_complete_from,
            unfinished_below=s.end_of_turn_unfinished_below,
            sentence_end_below=s.end_of_turn_sentence_end_below,
            last_word_below=s.end_of_turn_last_word_below,
            words_complete_from=s.end_of_turn_words_complete_from)
        self._ask_unfinished_ms = min(s.llm_unfinished_after_ms, s.end_of_turn_max_ms)
        return VADSettings.from_settings(s, overrides)

    # ---- audio in --------------------------------------------------------------------------
    async def feed(self, pcm: np.ndarray, arrived: float | None = None) -> None:
        """16 kHz mono int16 audio, in order, as it arrives; ``arrived``: when its end did, by
        the stream's clock (pipeline/arrival.py), if the transport knows it."""
        self._arrived = arrived
        if arrived is not None and self.metrics is not None:
            self.metrics.audio_behind.observe(self._behind())
        vad = self._vad
        vad.agent_speaking = self.conversation().agent_speaking
        if self._gate is not None:
            noisy = vad.noisy
            for probability in self._gate.hear(pcm):
                vad.model_heard(probability)
            if vad.noisy != noisy:
                log.info("the room is %s (%.2f s into the audio)",
                         "noisy" if vad.noisy else "quiet again", vad.time_s)
        for event in vad.feed(pcm):
            await self._on_event(event)
        await self._barge_ins.step()
        held = self._held
        if held is not None and vad.paused:
            if vad.silence_ms >= self._ask_unfinished_ms:
                held.ask.set()
            if (verdict := _verdict(held)) is not None and vad.silence_ms >= verdict.wait_ms:
                await self._on_event(vad.end_now())
        self._maybe_interim()
        if self._read_ahead_due and not vad.speaking and self.conversation().running_job is None:
            self._read_ahead_due = False  # the answer is over and the user has not spoken yet
            self._start_prefill("")

    def _behind(self) -> float:
        """How long ago the latest audio arrived (0: the transport cannot tell)."""
        return 0.0 if self._arrived is None else time.monotonic() - self._arrived

    async def _on_event(self, event: VADEvent) -> None:
        kind = event.kind
        if kind == "duck":
            self._barge_ins.duck()
        elif kind == "reject":
            if self._barge_ins.current is None:
                self.playback.resume()  # a click or cough: carry on talking
        elif kind == "pause":
            await self._abandon()
            barge = self._barge_ins.current  # over the agent: answered only if it interrupts
            if barge is None or await self._barge_ins.interrupts(barge):
                await self._speculate(event.pcm)
        elif kind == "resume":
            await self._abandon()  # the user spoke on: drop it unheard
        elif kind == "start":
            await self._abandon()
            self._before = None  # taken back by speech that has ended since: joined or not
            await self._speech_started()
        else:
            await self._speech_ended(event)

    # ---- end of turn -----------------------------------------------------------------------
    async def _speculate(self, pcm: np.ndarray) -> None:
        """Answer the utterance so far now, holding its messages and audio until the end of
        turn is confirmed; judge meanwhile whether it is over."""
        log.debug("pause: speculative answer")
        self._stop_prefill()
        pcm = self._joined(pcm)
        output = HeldOutput(self.speech_output(), self.send)
        hearing = self._spawn(self.stt.hear(pcm), "speculative-stt")
        record = self._new_record()
        ask = asyncio.Event()
        words = self._spawn(self._words_end(hearing), "end-of-turn-words")
        transcript = self._spawn(self._text_of(hearing, words, ask, record), "speculative-text")
        await self.conversation().start_utterance(pcm, output, record, transcript,
                                                   emit=output.emit, confirmed=output.confirmed)
        verdict = self._spawn(self._judge_turn(pcm, hearing, words), "end-of-turn")
        self._held = _Speculation(pcm, output, record, verdict, ask)

    async def _text_of(self, hearing: Awaitable[Hearing], words: asyncio.Task[Ending | None],
                       ask: asyncio.Event, record: TurnRecord) -> str:
        """The words the speculative answer answers. Words that stop mid-sentence ("I'd like
        to book a table for", or such a reading nearly as likely) make the turn wait up to
        ``end_of_turn_max_ms`` for more; the LLM is asked only once the silence reaches
        ``llm_unfinished_after_ms`` (``ask``), so a pause to think, which most such pauses
        are, costs no LLM request (an endpoint's tokens, a shared model's CPU)."""
        heard = await hearing
        text = await self.stt.choose(heard)
        record.stt_done = time.monotonic()
        if self._ask_unfinished_ms and not ask.is_set() and \
                self._policy.words_wait(heard.text, heard.alternatives):
            log.debug("unfinished words %r: the LLM waits for %d ms of silence", text,
                      self._ask_unfinished_ms)
            await ask.wait()
            record.words_held_until = time.monotonic()
        if self.llm_shares_cpu:
            await asyncio.wait({words})  # the words' judge first, not beside the LLM's prompt
        return text

    async def _words_end(self, hearing: Awaitable[Hearing]) -> Ending | None:
        """How the transcript's words end, by the language model (None: no words, words the
        rules already find unfinished or ending on a sign-off, or the model failed)."""
        try:
            heard = await hearing
        except Exception:  # no transcript: the verdict falls back without words (_judge_turn)
            return None
        if self._policy.words_wait(heard.text, heard.alternatives) is not None or \
                signs_off(heard.text):
            return None  # the words decide already: the language model cannot add to it
        try:
            return await self.stt.ending(heard.text, self.conversation().last_said())
        except STTError as exc:
            log.warning("the language model's end-of-turn judgement failed: %s", exc)
            return None

    async def _judge_turn(self, pcm: np.ndarray, hearing: asyncio.Task[Hearing],
                          words: asyncio.Task[Ending | None]) -> Verdict:
        """The end-of-turn verdict on the speculative pause, from the turn model (on the audio,
        at once, beside speech to text) and the words (``words``: judged right after the
        transcript). A judge beside the embedded LLM takes a core from it: the words' judge
        there cost the first token ~130 ms on an AMD EPYC (~310 against ~175 ms), so such an
        LLM is asked once the words are judged (``llm_shares_cpu``); a remote one at once. On
        a 2.1 GHz Xeon, judged after the answer had begun, both judges had landed in the
        embedded model's prompt and first piece (docs/performance.md)."""
        async def probability() -> float | None:
            if self.turn_model is None:
                return None
            try:
                return await self.turn_model.complete(pcm)
            except Exception as exc:  # the fixed silence decides instead
                log.warning("end-of-turn model failed: %s", exc)
                return None

        turn_p = asyncio.ensure_future(probability())  # the audio alone: at once
        try:
            await asyncio.wait({hearing})  # never cancels the answer's own transcript
            if hearing.cancelled() or hearing.exception():  # no words: no answer to wait for
                return self._policy.judge(await turn_p, None)
            heard = hearing.result()
            p, ends = await asyncio.gather(turn_p, asyncio.shield(words))
        finally:
            turn_p.cancel()
        verdict = self._policy.judge(p, heard.text, heard.alternatives, ends)
        log.debug("end of turn after %d ms of silence: %s (turn model %s, %r, %s; also %r)",
                  verdict.wait_ms, verdict.reason, p, heard.text, ends, heard.alternatives)
        return verdict

    async def _abandon(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.output.discard()
            held.verdict.cancel()
            await self.conversation().interrupt()  # the held answer is the current job

    async def _speech_ended(self, event: VADEvent) -> None:
        if self._interim is not None and not self._interim.done():
            self._interim.cancel()
        self._stop_prefill()
        now = time.monotonic()
        speech_end = now - event.silence_ms / 1000
        barge, self._barge_ins.current = self._barge_ins.current, None
        if barge is not None and not await self._barge_ins.interrupts(barge):
            self._record = self._before = None
            await self._abandon()
            self._refresh_vad()
            return
        held, self._held = self._held, None
        pcm, self._before = self._joined(event.pcm), None
        if held is not None and np.array_equal(held.pcm, pcm):
            await self.send(SpeechEnd())
            _decided(held.record, speech_end, now, _verdict(held))
            held.record.speculative_stt = True
            held.ask.set()
            await held.output.commit()
        else:
            if held is not None:
                self._held = held
                await self._abandon()
            await self.send(SpeechEnd())
            record = self._record or self._new_record()
            _decided(record, speech_end, now, None)
            await self.conversation().start_utterance(pcm, self.speech_output(), record)
        self._record = None
        self._read_ahead_due = True
        self._refresh_vad()

    def _refresh_vad(self) -> None:
        if (wanted := self.vad_settings()) != self._vad.settings:  # the stage changed
            self._vad = StreamingVAD(wanted)
            self.playback.resume()

    # ---- speech starts ---------------------------------------------------------------------
    async def _speech_started(self) -> None:
        record = self._record = self._new_record()
        turn = self.conversation().interruptible_turn()
        log.debug("speech started (agent speaking: %s)", turn is not None)
        if not self._barge_ins.candidate(record, turn):
            await self._user_speaks(turn, time.monotonic())

    async def _user_speaks(self, turn: Turn | None, detected: float) -> None:
        """The user has the floor: ``speech-start``, and the agent's turn (if it is still
        talking) is cut; ``detected`` is when the interrupting speech counted."""
        await self.send(SpeechStart())
        if turn is not None:
            turn.record.barge_in_detected = detected
            before = await self.conversation().cut_by_user()
            if before is not None:
                self._before = np.concatenate(
                    [before, np.zeros(int(JOIN_GAP_S * STT_RATE), dtype=before.dtype)])
        self.playback.resume()
        self._last_interim = time.monotonic()
        self._spawn(self._prepare_judge(), "prepare-judge")
        self._prefilled_words = 0
        if turn is None and self._prefill is None:  # the history is complete, and was not
            self._start_prefill("")  # read since the answer ended: the model may read it now

    async def _prepare_judge(self, words: str = "") -> None:
        """While the user speaks, the words' judge reads what they answer, and the words of
        an interim transcript (readings.py ``prepare``): the verdict at the pause then costs
        ~30-50 ms instead of ~80-150."""
        with contextlib.suppress(STTError):
            await self.stt.prepare_ending(self.conversation().last_said(), words)

    # ---- interim transcripts ---------------------------------------------------------------
    def _maybe_interim(self) -> None:
        vad = self._vad
        if (vad.speaking and self._held is None  # a paused user has a transcript coming
                and self._barge_ins.current is None
                and self.settings.interim_transcripts
                and not self.busy()  # best effort: shed under load
                and vad.time_s and time.monotonic() - self._last_interim >= INTERIM_EVERY_S
                and vad.utterance_samples >= INTERIM_AFTER_S * STT_RATE
                and (self._interim is None or self._interim.done())):
            self._last_interim = time.monotonic()
            self._interim = self._spawn(
                self._interim_transcript(self._joined(vad.utterance_so_far())),
                "interim-transcript")

    async def _interim_transcript(self, pcm: np.ndarray) -> None:
        text = await self.stt.transcribe(pcm, urgent=False)
        if not text.strip() or self._closed:
            return
        await self.send(Transcript(text=text, is_final=False))
        if not self._vad.speaking or self._held is not None:
            return  # the words are judged and answered already: nothing to read ahead
        self._spawn(self._prepare_judge(text), "prepare-judge")
        words = len(text.split())
        if words >= self._prefilled_words + PREFILL_MIN_WORDS:
            self._prefilled_words = words
            self._start_prefill(text.strip())

    # ---- the LLM reads ahead -----------------------------------------------------------------
    def _start_prefill(self, words: str) -> None:
        """The embedded model reads the prompt of the user's next answer up to ``words``
        (``Settings.llm_prefill``; it runs only while nothing else computes, a few tokens a
        step: llm/local_engine.py): the history once the agent's answer is over (or as they
        start to speak), then the words of a long utterance. The answer then reads only the
        rest. Read in the quiet before the user speaks, the request behind a playbook's intent
        check (the support playbook's ticket note, its wrap-up's answer) is mostly read
        before it is needed: while the user spoke, the first of them took all the time."""
        if not (self.settings.llm_prefill and self.llm_shares_cpu) or self._closed:
            return
        self._stop_prefill()
        self._prefill = self._spawn(self.conversation().prefill(words), "prefill")

    def _stop_prefill(self) -> None:
        """The user paused: their answer's request comes next (the tokens read stay)."""
        if self._prefill is not None and not self._prefill.done():
            self._prefill.cancel()
        self._prefill = None

    def _joined(self, pcm: np.ndarray) -> np.ndarray:
        """The utterance so far, after the one taken back if any (at most
        ``max_audio_seconds`` in all: the newest audio)."""
        if self._before is None:
            return pcm
        longest = int(self.settings.max_audio_seconds * STT_RATE)
        return np.concatenate([self._before, pcm])[-longest:]

    # ---- lifecycle -------------------------------------------------------------------------
    def _new_record(self) -> TurnRecord:
        session = self.conversation().session
        return TurnRecord(session_id=session.id if session is not None else "?")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"listen-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        self._closed = True
        if self._held is not None:
            self._held.output.discard()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _verdict(held: _Speculation) -> Verdict | None:
    task = held.verdict
    if not task.done() or task.cancelled() or task.exception() is not None:
        return None
    return task.result()


def _decided(record: TurnRecord, speech_end: float, now: float, verdict: Verdict | None) -> None:
    """The turn record's end-of-turn figures: when the user stopped, when we decided, why."""
    record.speech_end = speech_end
    record.started = now
    record.turn_decided = now
    record.turn_decision = verdict.reason if verdict is not None else "silence"
    record.turn_probability = verdict.probability if verdict is not None else None
