"""One conversation: a session's turns, whichever transport carries them.

A transport (the WebSocket's ``audio`` messages, WebRTC media, later a phone line) hands a
``Conversation`` finished utterances (16 kHz PCM) and barge-ins; the conversation runs each
utterance through speech-to-text and a ``Turn`` (LLM and speech), sends what the turn says
through the transport's ``send``, and keeps the session's history. It needs from its host only
what ``ConversationServices`` declares, and imports no transport and no server.

Cancellation has one path, ``interrupt()``: it cancels the running turn (speech stops at once;
what was already said stays in the history) or, before a turn exists, the utterance's
speech-to-text. A real interruption by the user (``cut_by_user``) goes that way too, and when
none of the answer was heard and it used no tool, it also takes the utterance back: the user
was not done (the end of turn came too soon), and the listener hears those words again joined
to what they say now, as one turn.

A turn works on its own copy of the session's state (a playbook's stage and facts): the
session takes it when the turn is kept. A speculative answer dropped unheard, or a turn taken
back, leaves the state as it was: "Thank you." answered at a pause had moved a playbook to its
goodbye, and "... but it is still slow" that followed was then answered there.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import numpy as np

from ..metrics import TurnRecord, session_tag
from ..pipeline.answer_guard import AnswerGuard
from ..pipeline.chunker import SentenceChunker
from ..pipeline.end_of_turn import Ending
from ..pipeline.pacing import Pacing
from ..pipeline.speech import SpeechOutput
from ..pipeline.stt import Hearing, STTError
from ..pipeline.turn import Responder, Turn, TurnContext
from ..protocol import (
    Error,
    ErrorCode,
    Message,
    ProtocolError,
    StageChange,
    Transcript,
    TurnMetrics,
    VisionAttachment,
)
from .limits import MemoryBudget
from .sessions import Session, SessionStore

__all__ = ["Conversation", "ConversationServices", "Send"]

log = logging.getLogger(__name__)

Send = Callable[[Message], Awaitable[None]]
BUSY = ("the server holds as much client input as its memory budget allows ({} MiB); "
        "message dropped, try again in a moment")


class Transcriber(Protocol):
    async def transcribe(self, pcm: np.ndarray, *, urgent: bool = True) -> str: ...

    async def hear(self, pcm: np.ndarray, *, urgent: bool = True,
                   prompt: str = "") -> Hearing: ...

    async def choose(self, hearing: Hearing, *, urgent: bool = True) -> str: ...

    async def ending(self, text: str, said_before: str = "") -> Ending | None: ...

    async def prepare_ending(self, said_before: str, words: str = "") -> None: ...


class ConversationServices(Protocol):
    """What a conversation needs from the server hosting it."""

    stt: Transcriber
    tts: Any  # PiperTTS: ``Turn`` speaks with it
    sessions: SessionStore
    input_budget: MemoryBudget
    new_chunker: Callable[[], SentenceChunker]
    new_guard: Callable[[], AnswerGuard]
    new_pacing: Callable[[], Pacing]

    def responder_for(self, session: Session) -> Responder: ...

    def user_message(self, text: str, attachments: list[VisionAttachment]) -> dict[str, Any]: ...

    def record_turn(self, record: TurnRecord) -> None: ...


class Conversation:
    """The turns of one session; ``send`` delivers every message to the client."""

    def __init__(self, services: ConversationServices, session: Session, send: Send, *,
                 max_attachment_bytes: int) -> None:
        self.services = services
        self.session: Session | None = session  # None once another connection took it over
        self._send = send
        self._max_attachment_bytes = max_attachment_bytes
        self._attachments: list[VisionAttachment] = []
        self._attachment_bytes = 0  # their size, counted in the services' input budget
        self._job: asyncio.Task[None] | None = None
        self._turn: Turn | None = None
        self._turn_job: asyncio.Task[Any] | None = None  # the job that started ``_turn``
        self._utterance: np.ndarray | None = None  # the spoken utterance ``_job`` answers
        self._cut_by_user: Turn | None = None  # if cut unheard, its utterance leaves no history
        self._after: asyncio.Task[None] | None = None  # the last turn's ``ctx.after`` work
        self.report_turn_metrics = False  # the client asked for ``turn-metrics`` (extension)

    # ---- what transports ask --------------------------------------------------------------
    @property
    def agent_speaking(self) -> bool:
        return self._turn is not None and not self._turn.done

    @property
    def running_job(self) -> asyncio.Task[None] | None:
        """The utterance being answered, if any (graceful shutdown waits for it)."""
        return self._job if self._job is not None and not self._job.done() else None

    def interruptible_turn(self) -> Turn | None:
        """The running turn, if the user may cut it now (a playbook stage or an
        ``interruptible: false`` tool's announcement may forbid it)."""
        turn, session = self._turn, self.session
        if turn is None or turn.done or session is None:
            return None
        responder = self.services.responder_for(session)
        return turn if responder.interruptible(turn.ctx.state) else None

    def last_said(self) -> str:
        """The agent's last words in the history ("" before it has said any): what the user's
        next words answer, for the end-of-turn judge."""
        session = self.session
        for message in reversed(session.history if session is not None else []):
            content = message.get("content")
            if message.get("role") == "assistant" and isinstance(content, str) and content.strip():
                return content
        return ""

    def turn_taking(self) -> dict[str, Any]:
        """VAD overrides of the session's current playbook stage (may be empty)."""
        session = self.session
        if session is None:
            return {}
        return dict(self.services.responder_for(session).turn_taking(session.state))

    # ---- utterances and turns ---------------------------------------------------------------
    def queue_attachments(self, attachments: list[VisionAttachment]) -> None:
        """Hold images for the next turn, counted in the input budget until that turn ends (or
        the conversation closes)."""
        added = sum(len(a.data) for a in attachments)
        if self._attachment_bytes + added > self._max_attachment_bytes:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                f"attachments exceed {self._max_attachment_bytes} bytes")
        budget = self.services.input_budget
        if not budget.take(added):
            raise ProtocolError(ErrorCode.RATE_LIMITED, BUSY.format(budget.limit // 2**20))
        self._attachment_bytes += added
        self._attachments.extend(attachments)

    async def interrupt(self) -> bool:
        """The one cancellation path: stop the running turn (and its STT) now. True when
        speech was cut."""
        cut = False
        if self._turn is not None and not self._turn.done:
            cut = await self._turn.cancel()
        job, self._job = self._job, None
        if job is not None and not job.done():
            if self._turn_job is not job:
                job.cancel()  # still transcribing: nothing was said, nothing to keep
            # else its turn is over (cancelled or finished): let it record what was heard
            with contextlib.suppress(asyncio.CancelledError):
                await job
        return cut

    async def cut_by_user(self) -> np.ndarray | None:
        """A real interruption of the running answer (``interrupt``). When none of that answer
        was heard and it used no tool, the user's utterance it answered is taken back too: it
        enters no history, and it is returned (16 kHz) so that the listener hears it again
        joined to the words that cut it ("My favourite colour is" ... "blue"). Otherwise None:
        what was heard stays, as after any barge-in."""
        job, turn, pcm = self._job, self._turn, self._utterance
        if (job is None or job.done() or pcm is None or turn is None or turn.done
                or self._turn_job is not job):
            await self.interrupt()
            return None
        # set before the cancellation yields: the job may go on to the history first
        self._cut_by_user = turn
        await self.interrupt()  # cancels the turn; what it committed is final now
        if not _unheard(turn.committed):
            return None
        log.debug("cut before a word of the answer was heard: the utterance is heard again "
                  "with what follows")
        return pcm

    async def start_utterance(self, pcm: np.ndarray, output: SpeechOutput,
                              record: TurnRecord | None = None,
                              transcript: Awaitable[str] | None = None,
                              emit: Send | None = None,
                              confirmed: Callable[[], Awaitable[object]] | None = None) -> None:
        """Supersede any running turn and answer this 16 kHz utterance. WebRTC's speculative
        end of turn passes ``transcript`` (speech-to-text already under way), ``emit`` (holds
        messages until the end of turn is confirmed) and ``confirmed`` (returns once it is:
        a tool waits for it, ``TurnContext.confirmed``); an ``output`` whose ``discarded`` is
        true at the end was never heard and leaves no history."""
        await self.interrupt()
        session = self.session
        assert session is not None
        record = record or TurnRecord(session_id=session.id)
        self._utterance = pcm if len(pcm) else None
        attachments, self._attachments = self._attachments, []
        held, self._attachment_bytes = self._attachment_bytes, 0
        self._job = asyncio.create_task(self._answer(session, pcm, output, record, attachments,
                                                     transcript, emit or self._send, confirmed),
                                        name=f"utterance-{session_tag(session.id)}")
        if held:
            budget = self.services.input_budget
            self._job.add_done_callback(lambda _: budget.give_back(held))

    async def prefill(self, words: str) -> None:
        """The user is about to speak, or is speaking and has said ``words`` so far: have the
        model read the prompt of their answer up to them (``Responder.prefill``; after the
        last turn's work on the state), unless an answer is under way (it has the model) or
        images wait to go with the words."""
        if self._after is not None:  # the last turn's work on the state it leaves
            await asyncio.wait({self._after})
        session = self.session
        if session is None or self.running_job is not None or self._attachments:
            return
        ctx = TurnContext(history=session.history, emit=self._send,
                          user_message=self.services.user_message(words, []),
                          state=session.state)
        await self.services.responder_for(session).prefill(ctx)

    async def start_typed(self, text: str, output: SpeechOutput) -> None:
        """A typed user turn: answered like a spoken one, without speech-to-text (its text is
        sent back as the final ``transcript``, so every client shows it as the user's)."""

        async def typed() -> str:
            return text

        assert self.session is not None
        await self.start_utterance(np.zeros(0, dtype=np.int16), output, transcript=typed(),
                                   record=TurnRecord(session_id=self.session.id, typed=True))

    async def greet(self, text: str, output: SpeechOutput) -> None:
        """The agent speaks first (a playbook's ``greeting`` when a call connects): a turn
        without a user message, spoken and cut by a barge-in like an answer, its heard words
        kept in the history as the assistant's."""
        await self.interrupt()
        session = self.session
        assert session is not None
        self._utterance = None
        self._job = asyncio.create_task(self._say(session, text, output),
                                        name=f"greeting-{session_tag(session.id)}")

    async def _say(self, session: Session, text: str, output: SpeechOutput) -> None:
        services = self.services
        ctx = TurnContext(history=session.history, emit=self._send, user_message={},
                          state=session.state)
        turn = Turn(ctx=ctx, responder=_Saying(text), tts=services.tts, output=output,
                    record=TurnRecord(session_id=session.id), chunker=services.new_chunker,
                    guard=services.new_guard, pacing=services.new_pacing)
        self._turn, self._turn_job = turn, asyncio.current_task()
        turn.start()
        await turn.wait()
        await services.sessions.append_history(session, turn.committed)

    async def _answer(self, session: Session, pcm: np.ndarray, output: SpeechOutput,
                      record: TurnRecord, attachments: list[VisionAttachment],
                      transcript: Awaitable[str] | None, send: Send,
                      confirmed: Callable[[], Awaitable[object]] | None) -> None:
        services = self.services
        try:
            text = await (transcript or services.stt.transcribe(pcm))
        except STTError as exc:
            record.error = "STT_ERROR"
            await self._send(Error(code=ErrorCode.STT_ERROR, message=str(exc)))
            services.record_turn(record)
            return
        # a held answer to unfinished words waited after its speech to text (listening.py)
        record.stt_done = record.stt_done or time.monotonic()
        record.transcript = text
        await send(Transcript(text=text, is_final=True))
        if not text.strip():
            return
        if self._after is not None:  # the last turn's work on the state it leaves
            await asyncio.wait({self._after})
        moves: list[StageChange] = []  # the stages the turn went through, as the client saw

        async def emit(message: Message) -> None:
            if isinstance(message, StageChange):
                moves.append(message)
            await send(message)

        ctx = TurnContext(history=session.history, emit=emit,
                          user_message=services.user_message(text, attachments),
                          state=copy.deepcopy(session.state),  # the session's once kept
                          confirmed=confirmed)
        turn = Turn(ctx=ctx, responder=services.responder_for(session), tts=services.tts,
                    output=output, record=record, chunker=services.new_chunker,
                    guard=services.new_guard, pacing=services.new_pacing)
        self._turn, self._turn_job = turn, asyncio.current_task()
        turn.start()
        await turn.wait()
        if output.discarded:  # a speculative answer the user spoke on over: never heard
            return
        if self._cut_by_user is turn:
            self._cut_by_user = None
            if _unheard(turn.committed):  # heard again with what followed (cut_by_user)
                record.taken_back = True
                services.record_turn(record)  # counted, never sent: the client sees one turn
                if moves and moves[0].from_ != moves[-1].to:  # the client is told it is back
                    await self._send(StageChange(from_=moves[-1].to, to=moves[0].from_,
                                                 reason="taken_back"))
                return
        session.state = ctx.state  # kept: the session's state is the one the turn left
        await services.sessions.append_history(session, turn.committed)
        await services.sessions.save(session)  # with the state the turn left
        services.record_turn(record)
        if self.report_turn_metrics:
            await send(_turn_metrics(record))
        if ctx.after is not None:
            self._after = asyncio.create_task(self._follow_up(session, ctx.after),
                                              name=f"after-turn-{session_tag(session.id)}")

    async def _follow_up(self, session: Session, after: Callable[[], Awaitable[object]],
                         ) -> None:
        """A turn's ``after`` work on the state it left (the session's now), then the session
        saved again."""
        try:
            await after()
            await self.services.sessions.save(session)
        except Exception:  # the turn was heard; what it noted after is lost, not the call
            log.exception("a turn's work after it failed (session %s)", session_tag(session.id))

    async def close(self) -> None:
        """Stop any turn and give back what the conversation held."""
        await self.interrupt()
        if self._after is not None:
            self._after.cancel()
        self._attachments.clear()
        self.services.input_budget.give_back(self._attachment_bytes)
        self._attachment_bytes = 0


class _Saying:
    """A ``Responder`` that says a given text (a greeting)."""

    def __init__(self, text: str) -> None:
        self._text = text

    async def respond(self, ctx: TurnContext) -> AsyncIterator[str]:
        yield self._text

    def interruptible(self, state: dict[str, Any]) -> bool:
        return True

    def turn_taking(self, state: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def prefill(self, ctx: TurnContext) -> None:
        return None


def _unheard(committed: list[dict[str, Any]]) -> bool:
    """A cut turn of which the user heard nothing and that used no tool: its user message and
    at most an empty assistant message."""
    return all(m.get("role") == "user" or (m.get("role") == "assistant" and not m.get("content")
                                          and not m.get("tool_calls"))
               for m in committed)


def _turn_metrics(record: TurnRecord) -> TurnMetrics:
    """The record's figures for the client. A step finished before the end of speech was
    confirmed (speech-to-text run speculatively in the pause) took no time after it: 0."""
    figures = record.summary()

    def ms(key: str) -> float | None:
        value = figures[key]
        return max(0.0, float(value)) if isinstance(value, int | float) else None

    return TurnMetrics(stt_ms=ms("stt_ms"), llm_ttft_ms=ms("llm_ttft_ms"),
                       tts_first_audio_ms=ms("tts_first_audio_ms"),
                       first_audio_ms=ms("first_audio_ms"), total_ms=ms("total_ms"),
                       interrupted=record.interrupted, end_of_turn_ms=ms("end_of_turn_ms"),
                       end_of_turn=record.turn_decision or None)
