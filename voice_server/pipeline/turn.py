"""One conversational turn: responder (LLM) -> sentence chunker -> TTS -> speech output.

LLM streaming and TTS run concurrently: complete sentences go through a queue to the TTS task
while the LLM keeps streaming. ``Turn.cancel()`` is the single cancellation path used by
barge-in and by a newer request: it flushes the output, cancels the LLM stream and TTS tasks,
sends ``tts-cancelled`` when audio was cut, and leaves in ``committed`` only what the listener
actually heard (marked ``interrupted``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from ..config import Settings
from ..llm import (
    ChatRequest,
    LLMError,
    LLMRouter,
    LLMTimeout,
    StreamEvent,
    Usage,
    stream_text,
)
from ..metrics import TurnRecord, session_tag
from ..protocol import (
    Error,
    ErrorCode,
    LLMChunk,
    LLMResult,
    Message,
    TTSCancelled,
    TTSComplete,
    UsageReport,
)
from .answer_guard import AnswerGuard
from .audio import trim_leading_silence, trim_trailing_silence
from .chunker import SentenceChunker, spoken_words
from .pacing import Pacing
from .speech import SpeechOutput
from .speech_text import speech_text
from .tts import PiperTTS, TTSError

__all__ = ["ChatResponder", "HistoryWindow", "Responder", "Turn", "TurnContext", "llm_messages"]

log = logging.getLogger(__name__)

Emit = Callable[[Message], Awaitable[None]]
Piece = tuple[str, str]  # a piece of the answer as written, and as said (speech_text)
_PAUSE_MARKS = (".", "!", "?", "…", ",", ";", ":", "—", '"', "'", ")")
_OPENAI_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id"}


@dataclass
class TurnContext:
    """What a responder sees and may add to during one turn."""

    history: list[dict[str, Any]]
    user_message: dict[str, Any]
    emit: Emit
    state: dict[str, Any] = field(default_factory=dict)  # session-persisted (playbook) state
    pending: list[dict[str, Any]] = field(default_factory=list)  # kept even if cancelled
    usage: Usage | None = None
    # work the answer leaves for after it is heard (a playbook's note of facts that its
    # question did not wait for): whoever runs the responder awaits it after the turn and
    # before the next one reads ``state``; the turn itself is over when its audio is
    after: Callable[[], Awaitable[object]] | None = None
    # a speculative answer's (begun in a pause, before the end of turn): returns once the end
    # of turn is confirmed; a tool waits for it, so none acts on words the user then went on
    # from (the answer is dropped unheard, and the call would have been made all the same)
    confirmed: Callable[[], Awaitable[object]] | None = None


class Responder(Protocol):
    """Produces the spoken answer of a turn as text deltas (a playbook runs tools first)."""

    def respond(self, ctx: TurnContext) -> AsyncIterator[str]: ...

    def interruptible(self, state: dict[str, Any]) -> bool:
        """May the user barge in now (``state``: the session's persisted state)?"""
        ...

    def turn_taking(self, state: dict[str, Any]) -> dict[str, Any]:
        """VAD overrides for now (``Settings.vad_<name>`` keys, ``barge_in``); may be empty."""
        ...

    async def prefill(self, ctx: TurnContext) -> None:
        """Have the model compute ahead the prompt of the answer to ``ctx``, whose user
        message holds the words heard so far (the user still speaks); may do nothing."""
        ...


@dataclass(frozen=True)
class HistoryWindow:
    """How much history goes to the LLM: at most ``messages`` messages and ``chars``
    characters of content, the newest kept. A long conversation never outgrows the model's
    context; the system prompt and the playbook stage are sent besides, always.

    Once the history outgrows it, its oldest messages are dropped until half of it is used
    (``first_sent``), not one turn's worth each turn. A model reads again everything after
    the first message that changed: dropping the oldest turn every turn changed the second
    message of every prompt, and from the 22nd turn on the embedded model read the whole
    history again for each answer (first token 5.5 s instead of 0.3 s, 1.5B model, 2 cores,
    bench/long_conversation.py; a remote endpoint's prompt cache misses the same way). Now
    the prompt's start stays put for about a quarter of ``messages`` turns between drops."""

    messages: int = 40
    chars: int = 16_000

    @classmethod
    def from_settings(cls, settings: Settings) -> HistoryWindow:
        return cls(settings.max_history_messages, settings.max_history_chars)

    def first_sent(self, history: list[dict[str, Any]]) -> int:
        """The index of the oldest message of ``history`` that is sent. As the history grew
        message by message, each time it outgrew the window the oldest were dropped until at
        most half of its messages and characters were used (the newest message kept unless
        it alone outgrows the window). A function of the history alone: the same index for
        the next turns until the window fills again."""
        sizes = [_size(m) for m in history]
        start, used = 0, 0
        for newest, size in enumerate(sizes):
            used += size
            if newest + 1 - start <= self.messages and used <= self.chars:
                continue
            while start < newest and (newest + 1 - start > self.messages // 2
                                      or used > self.chars // 2):
                used -= sizes[start]
                start += 1
            if used > self.chars:  # the newest alone is too long to send
                used, start = 0, newest + 1
        if start:  # begin with the user's words (a template may require it), never a tool's
            start = next((i for i in range(start, len(history))
                          if history[i].get("role") == "user"), start)
        return start


DEFAULT_WINDOW = HistoryWindow()


def _size(message: dict[str, Any]) -> int:
    return len(str(message.get("content") or "")) + len(str(message.get("tool_calls") or ""))


def llm_messages(history: list[dict[str, Any]],
                 window: HistoryWindow | None = None) -> list[dict[str, Any]]:
    """History as an OpenAI message list: our bookkeeping keys stripped, the oldest dropped
    as ``window.first_sent`` says."""
    items = history[window.first_sent(history):] if window else history
    while items and items[0].get("role") == "tool":  # never start with an orphan tool result
        items = items[1:]
    return [{k: v for k, v in m.items() if k in _OPENAI_KEYS} for m in items]


@dataclass(eq=False)
class ChatResponder:
    """The default responder: system prompt + history + user message, streamed."""

    router: LLMRouter
    _: KW_ONLY
    system_prompt: str
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    history: HistoryWindow = DEFAULT_WINDOW
    timeout_s: float | None = None

    def interruptible(self, state: dict[str, Any]) -> bool:
        return True

    def turn_taking(self, state: dict[str, Any]) -> dict[str, Any]:
        return {}

    def _request(self, ctx: TurnContext) -> ChatRequest:
        messages = [{"role": "system", "content": self.system_prompt},
                    *llm_messages(ctx.history, self.history), ctx.user_message]
        return ChatRequest(messages=messages, model=self.model, temperature=self.temperature,
                           max_tokens=self.max_tokens, timeout_s=self.timeout_s)

    async def prefill(self, ctx: TurnContext) -> None:
        """The embedded model computes the prompt up to the user's words so far (a remote
        endpoint is not asked: ``LLMRouter.warm``)."""
        with contextlib.suppress(LLMError):
            await self.router.warm(self._request(ctx), save=False)

    async def respond(self, ctx: TurnContext) -> AsyncIterator[str]:
        request = self._request(ctx)

        def done(event: StreamEvent) -> None:
            ctx.usage = event.usage

        async with contextlib.aclosing(
                stream_text(self.router, request, self.timeout_s, on_done=done)) as pieces:
            async for piece in pieces:
                yield piece


class Turn:
    """Run one answer; ``start()`` then await ``wait()``, or ``cancel()`` on barge-in."""

    def __init__(self, *, ctx: TurnContext, responder: Responder, tts: PiperTTS,
                 output: SpeechOutput, record: TurnRecord,
                 chunker: Callable[[], SentenceChunker] = SentenceChunker,
                 guard: Callable[[], AnswerGuard] = AnswerGuard,
                 pacing: Callable[[], Pacing] = Pacing) -> None:
        self.ctx = ctx
        self.record = record
        self._responder = responder
        self._tts = tts
        self._output = output
        self._emit = ctx.emit
        self._task: asyncio.Task[None] | None = None
        self._text: list[str] = []
        self._first_synthesized = asyncio.Event()
        self._new_chunker = chunker
        self._new_guard = guard
        self.committed: list[dict[str, Any]] = []
        self._pacing = pacing()
        self._synthesizing = False  # a piece is with Piper or on its way to the output
        self._streamed = False  # an llm-chunk went out: the client shows an answer in progress
        self._answered = False  # the final ``llm`` went out

    def spoken_text(self) -> str:
        """The sentences handed to speech so far (what the user may hear back as echo)."""
        return " ".join(self._output.heard.sentences)

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self._run(),
                                         name=f"turn-{session_tag(self.record.session_id)}")
        return self._task

    @property
    def done(self) -> bool:
        return self._task is None or self._task.done()

    async def wait(self) -> None:
        """Until the turn ends, however: finished, failed or cancelled by ``cancel()`` (what
        it said by then is in ``committed``). A cancellation of the caller propagates."""
        if self._task is None:
            return
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the waiter itself is being cancelled
            if not self._task.done():
                raise

    async def cancel(self) -> bool:
        """Stop now (barge-in or superseded). Returns True if speech was cut."""
        if self._task is None or self._task.done():
            return False
        cut = self._output.cancel()
        self.record.interrupted = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.record.audio_stopped = time.monotonic()
        if cut or self._streamed:  # every turn the client saw begin is closed for it
            await self._emit(TTSCancelled())
        return cut

    async def _run(self) -> None:
        rec = self.record
        sentences: asyncio.Queue[Piece | None] = asyncio.Queue()
        speaker = asyncio.create_task(self._speak(sentences),
                                      name=f"tts-{session_tag(rec.session_id)}")
        try:
            await self._stream_answer(sentences)
            await speaker
            await self._output.drain()
            if rec.first_audio is not None:
                await self._emit(TTSComplete())
        except TTSError as exc:
            rec.error = "TTS_ERROR"
            await self._close_answer()
            await self._emit(Error(code=ErrorCode.TTS_ERROR, message=str(exc)))
        except asyncio.CancelledError:
            rec.interrupted = True
            raise
        except Exception:
            log.exception("turn failed (session %s)", session_tag(rec.session_id))
            rec.error = "INTERNAL_ERROR"
            await self._close_answer()
            await self._emit(Error(code=ErrorCode.INTERNAL_ERROR,
                                   message="the turn failed unexpectedly; try again"))
        finally:
            speaker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await speaker
            rec.finished = time.monotonic()
            rec.playback_gaps_ms = list(self._output.gaps_ms)
            self._commit()

    async def _stream_answer(self, sentences: asyncio.Queue[Piece | None]) -> None:
        rec = self.record
        chunker = self._new_chunker()
        guard = self._new_guard()
        held: str | None = None  # one delta held back so the last llm-chunk carries done=true

        async def take(delta: str) -> None:
            nonlocal held
            self._text.append(delta)
            if held is not None:
                await self._emit(LLMChunk(content=held, done=False))
                self._streamed = True
            held = delta
            self._pacing.delta(time.monotonic())
            pieces = chunker.feed(delta)
            for piece in pieces:
                queue_piece(piece)
            if not pieces and self._speech_runs_dry(sentences, chunker) and (
                    piece := chunker.take_words()) is not None:
                rec.early_cuts += 1
                log.debug("speech about to run dry (%.0f ms ahead, a delta every %.0f ms): "
                          "%r spoken now (session %s)", self._output.ahead_s() * 1000,
                          self._pacing.token_s * 1000, piece, session_tag(rec.session_id))
                queue_piece(piece)

        def queue_piece(piece: str) -> None:
            said = speech_text(piece)
            if any(ch.isalnum() for ch in said):  # a piece of emoji or marks alone is not said
                if rec.first_chunk is None:
                    rec.first_chunk = time.monotonic()
                sentences.put_nowait((piece, said))

        rec.llm_requested = time.monotonic()
        stream = self._responder.respond(self.ctx)
        failure: LLMError | None = None  # the LLM failed mid-answer
        try:
            async for delta in stream:
                if rec.llm_first_token is None:
                    rec.llm_first_token = time.monotonic()
                if delta := guard.admit(delta):
                    await take(delta)
                if guard.stopped is not None:
                    log.info("answer ended early (%s) in session %s", guard.stopped,
                             session_tag(rec.session_id))
                    break
                if rec.first_chunk is not None and not self._first_synthesized.is_set():
                    # Let Piper have the CPU for the first piece: the rest of the answer is
                    # not needed before the first piece has played, and on 2 cores the LLM
                    # would otherwise slow that synthesis down (a local model pauses: its
                    # token hand-off is bounded).
                    await self._first_synthesized.wait()
                    self._pacing.paused()
        except LLMError as exc:
            if self._text:
                # mid-answer: the whole pieces already given to speech are still spoken and
                # the turn closes with tts-complete as any other; the words after the last
                # whole piece (cut off mid-sentence) are shown, not spoken
                failure = exc
            else:  # before the first word: say why there is no answer rather than be silent
                await self._llm_failed(exc)
                await take(guard.admit(guard.apology))
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        rec.llm_done = time.monotonic()
        if guard.stopped == "loop":
            # the repeat is neither spoken nor kept; the words before it are, even when no
            # piece was cut yet ("There are 7,987,987,987..." said nothing, no tts-complete)
            self._text = [guard.kept]
            chunker.drop(guard.repeated)
        if failure is None and (fallback := guard.fallback()) is not None:
            log.info("empty answer in session %s: saying the fallback",
                     session_tag(rec.session_id))
            await take(fallback)
        if failure is None and (rest := chunker.flush()) is not None:
            queue_piece(rest)
        sentences.put_nowait(None)
        await self._emit(LLMChunk(content=held or "", done=True))
        self._streamed = True
        await self._emit(LLMResult(text="".join(self._text)))
        self._answered = True
        if failure is not None:
            await self._llm_failed(failure)
        elif self.ctx.usage is not None:
            self.record.prompt_tokens = self.ctx.usage.input_tokens
            self.record.prompt_cached = self.ctx.usage.cached_tokens
            await self._emit(UsageReport(input_tokens=self.ctx.usage.input_tokens,
                                         output_tokens=self.ctx.usage.output_tokens))

    def _speech_runs_dry(self, sentences: asyncio.Queue[Piece | None],
                         chunker: SentenceChunker) -> bool:
        """Whether the audio playing now would end before a piece written after the next
        delta could follow it (pacing.py): only once speech has begun and nothing else is on
        its way to it (checked first: the held words are counted only then)."""
        return (self.record.first_audio is not None and sentences.empty()
                and not self._synthesizing
                and self._pacing.running_dry(self._output.ahead_s(),
                                             chunker.complete_words()))

    async def _llm_failed(self, exc: LLMError) -> None:
        self.record.error = "LLM_TIMEOUT" if isinstance(exc, LLMTimeout) else "LLM_ERROR"
        log.warning("%s in session %s: %s", self.record.error, session_tag(self.record.session_id),
                    exc)
        await self._emit(Error(code=ErrorCode(self.record.error), message=str(exc)))

    async def _close_answer(self) -> None:
        """A failed turn whose answer had begun: the ``llm`` text as far as it got, so no
        client is left showing an answer in progress."""
        if self._streamed and not self._answered:
            self._answered = True
            await self._emit(LLMResult(text="".join(self._text)))

    async def _speak(self, sentences: asyncio.Queue[Piece | None]) -> None:
        try:
            await self._speak_all(sentences)
        finally:
            self._first_synthesized.set()  # never leave the LLM side waiting

    async def _speak_all(self, sentences: asyncio.Queue[Piece | None]) -> None:
        rec = self.record
        while (piece := await sentences.get()) is not None:
            self._synthesizing = True
            text, said = piece
            first = rec.tts_synth_start is None
            began = time.monotonic()
            if first:
                rec.tts_synth_start = began
            pcm = await self._tts.synthesize(said, urgent=first)
            took, words = time.monotonic() - began, spoken_words(said)
            self._pacing.synthesized(words, took)
            log.debug("piece of %d words synthesized in %.0f ms, %.0f ms of audio ahead "
                      "(session %s)", words, took * 1000,
                      self._output.ahead_s() * 1000, session_tag(rec.session_id))
            if first:
                rec.tts_synth_done = time.monotonic()
                self._first_synthesized.set()
            if len(pcm) == 0:
                self._synthesizing = False
                continue
            if first:  # nothing plays before it: its leading silence is pure latency
                pcm = trim_leading_silence(pcm, self._tts.sample_rate)
            if not said.endswith(_PAUSE_MARKS):  # cut mid-sentence (chunker.py)
                pcm = trim_trailing_silence(pcm, self._tts.sample_rate)
            await self._output.play(text, pcm, self._tts.sample_rate)
            self._synthesizing = False
            if self.record.first_audio is None:
                self.record.first_audio = time.monotonic()

    def _commit(self) -> None:
        """Decide what enters history: the user turn, tool steps, and what was heard."""
        full = "".join(self._text).strip()
        said = self._output.heard.text() if self.record.interrupted else full
        committed = [*([self.ctx.user_message] if self.ctx.user_message else []),
                     *self.ctx.pending]  # a greeting has no user message
        if said or full:
            entry: dict[str, Any] = {"role": "assistant", "content": said}
            if self.record.interrupted:
                entry["interrupted"] = True
                entry["full_text"] = full
            committed.append(entry)
        self.committed = committed
