"""``PlaybookResponder``: the turn pipeline's ``Responder`` for a playbook.

One call of ``respond(ctx)`` is one user turn:

1. restore the engine state from ``ctx.state`` (the session's playbook state);
2. classify the user's intent, if a transition of the current stage waits for one and none
   checked before it fires without (one extra, non-streamed LLM call with a forced tool);
3. fire at most one turn-start transition (``timeout_s``, ``max_turns``, ``keyword``, ``intent``):
   emit ``stage-change``, yield its ``say`` and the new stage's ``on_enter.say``;
4. in a stage with ``collect`` (``collect.py``): note the facts the caller gave (one
   structured-output request), then either call the collected tool (step 5 answers with its
   result), or say the question for the next missing fact (the turn ends), or go on;
5. tool rounds, at most ``globals.max_tool_rounds``: stream the LLM with the stage's tools (plus
   the built-in ``playbook_transition`` tool when an ``llm_decision`` transition applies); text
   deltas are yielded as they come (a model's "let me check" preamble is spoken while the tools
   run); requested tools run concurrently (in a speculative answer, begun in a pause before
   the end of turn, once that end is confirmed: ``TurnContext.confirmed``; a caller who goes
   on drops the answer, and no tool has acted on half their words), each bracketed by
   ``tool-call-start`` and ``tool-call-end{durationMs}``; after each one
   ``tool_called``/``tool_result`` transitions are checked, and the ``stage-change`` of those
   that fired follows the round's ``tool-call-end`` events; the next round then uses the new
   stage's prompt and tools;
6. when the model answers without tools, or the rounds are spent (then the request carries no
   tools so it must answer), the answer has streamed and the turn ends.

The requests the model gets are built in ``requests.py`` (``StageRequests``); while the caller
speaks, ``prefill`` has the embedded model read the turn's first one up to their words (or,
behind an intent check, the notes it may lead to).

Spec: "Playbook Mode Events" (``tool-call-start``, ``tool-call-end``, ``stage-change``).

History: the assistant message carrying ``tool_calls`` and every ``tool`` result are appended to
``ctx.pending`` as they happen, so the pipeline commits them even if the turn is cancelled. A
barge-in (task cancellation) while tools run waits for them to finish (each is bounded by its own
timeout) and records their results before the cancellation propagates: no half-done call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from datetime import date
from typing import Any

from ..llm import (
    ChatRequest,
    LLMError,
    LLMRouter,
    StreamEvent,
    ToolCall,
    Usage,
    message_text,
    stream_text,
)
from ..pipeline.turn import DEFAULT_WINDOW, HistoryWindow, TurnContext, llm_messages
from ..protocol import StageChange, ToolCallEnd, ToolCallStart
from .collect import FactSheet, declined, standing_offer
from .confirm import confirms, heard_whole, not_yet, read_back
from .engine import TRANSITION_TOOL, Decision, Engine, PlaybookState, ToolEvent
from .requests import StageRequests, agent_last, last_asked
from .schema import Playbook
from .tools import ToolOutcome, ToolRunner, answer_of, offer_of

__all__ = ["PlaybookResponder", "TurnContext"]

log = logging.getLogger(__name__)

FINAL_NUDGE = "Reply to the user now in one or two short sentences, using the information above."
MAX_CALLS_PER_ROUND = 16  # a runaway model's extra calls in one answer are dropped
UNINTERRUPTIBLE_KEY = "uninterruptible"  # in ctx.state while a turn announces such a result


class PlaybookResponder:
    """Runs one playbook for a session's turns; implements ``pipeline.turn.Responder``.

    It holds no per-session state (that lives in ``ctx.state``), so one instance per playbook
    version can serve every session concurrently (e.g. cached by ``(id, registry.version)``).
    Construction:

    - ``playbook``: from ``PlaybookRegistry.get(id)``; the responder keeps that version;
    - ``router``: the server's ``LLMRouter`` (a stage's ``llm.model`` is resolved through it);
    - ``history``: how much history is sent to the LLM; ``timeout_s``: deadline of each LLM
      request; ``model``/``temperature``/``max_tokens``: defaults (e.g. from Settings) used
      where the playbook's ``globals.llm`` and the stage's ``llm`` leave them unset;
    - ``clock``: wall-clock seconds (stage timeouts survive restarts and reconnects);
    - ``executor``: runs synchronous Python tool handlers (default: the loop's executor).

    Use it as ``async with`` or call ``aclose()`` (closes the webhook HTTP session).

    Per turn the pipeline passes a ``TurnContext``: ``history`` (committed messages),
    ``user_message``, ``emit`` (receives ``ToolCallStart``, ``ToolCallEnd``, ``StageChange``),
    ``state`` (the session's ``Session.state`` dict) and ``pending``. ``respond`` appends the
    assistant ``tool_calls`` message and the ``tool`` results to ``ctx.pending`` and adds LLM
    token usage to ``ctx.usage``; the pipeline commits ``[user, *pending, assistant text]``.

    Session state: ``ctx.state`` is updated in place with the keys of ``PlaybookState``
    (``playbook``, ``stage``, ``stage_turns``, ``turns``, ``entered_at``, ``data``,
    ``history_from``) plus ``uninterruptible``, after every change; it is the turn's copy of the
    session's, which the session takes (and saves, for ``reconnect``) when the turn is kept
    (server/conversation.py); state of another playbook id is replaced by a fresh one.
    ``history_from`` is the index in the session history where the playbook's view starts (set
    by ``clear_history``); the history list should only grow.

    Between turns the pipeline may ask ``stage(state)``, ``turn_taking(state)`` (VAD and
    barge-in overrides of the current stage), ``interruptible(state)`` (False while an
    ``interruptible: false`` tool's result is being announced, or when the stage disables
    barge-in) and ``timeout_due(state)``.
    """

    def __init__(self, playbook: Playbook, router: LLMRouter, *,
                 history: HistoryWindow = DEFAULT_WINDOW,
                 timeout_s: float | None = 30.0, model: str | None = None,
                 temperature: float | None = None, max_tokens: int | None = None,
                 clock: Callable[[], float] = time.time, executor: Executor | None = None,
                 tools: ToolRunner | None = None) -> None:
        self.playbook = playbook
        self.engine = Engine(playbook)
        self._router = router
        self._history = history
        self._timeout_s = timeout_s
        self._clock = clock
        self._tools = tools or ToolRunner(playbook, executor=executor)
        self.requests = StageRequests(playbook, self.engine, self._tools, history=history,
                                      timeout_s=timeout_s, defaults=(model, temperature,
                                                                     max_tokens))

    async def __aenter__(self) -> PlaybookResponder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._tools.aclose()

    # -- what the pipeline asks between turns ------------------------------------------------
    def state(self, state: dict[str, Any]) -> PlaybookState:
        """The engine state held in a session state dict (fresh when absent or foreign)."""
        return self.engine.restore(state, self._clock())

    def stage(self, state: dict[str, Any]) -> str:
        return self.state(state).stage

    def turn_taking(self, state: dict[str, Any]) -> dict[str, Any]:
        """VAD/barge-in overrides of the current stage: the ``schema.TurnTaking`` fields that
        are set (``end_silence_ms``, ``min_speech_ms``, ``aggressiveness``: override
        ``Settings.vad_<name>``; ``barge_in: false``: do not let the user interrupt)."""
        return self.engine.turn_taking(self.state(state))

    def timeout_due(self, state: dict[str, Any]) -> bool:
        """Whether a ``timeout_s`` transition of the current stage is due now (an idle timer may
        poll this and start a turn; otherwise timeouts are checked when the next turn starts)."""
        return self.engine.timed_out(self.state(state), self._clock())

    def interruptible(self, state: dict[str, Any]) -> bool:
        """False while the current turn announces the result of an ``interruptible: false``
        tool (and the stage's ``turn_taking.barge_in`` is not false): barge-in should wait."""
        if self.turn_taking(state).get("barge_in") is False:
            return False
        return not state.get(UNINTERRUPTIBLE_KEY, False)

    # -- one turn ------------------------------------------------------------------------
    async def prefill(self, ctx: TurnContext) -> None:
        """Have the embedded model read ahead the prompts of the turn's first request, or of
        the notes that may follow its intent check, up to the words heard so far
        (``StageRequests.first``, ``LLMRouter.warm``)."""

        async def read(request: ChatRequest) -> None:
            with contextlib.suppress(LLMError):
                await self._router.warm(request, save=False)

        await asyncio.gather(*map(read, self.requests.first(ctx, self._clock())))

    def warm_requests(self) -> list[ChatRequest]:
        """A request of each kind a stage makes (``StageRequests.warm``: server/warm.py)."""
        return self.requests.warm(self._clock())

    async def respond(self, ctx: TurnContext) -> AsyncIterator[str]:
        """Yield the spoken text deltas of one turn (see the module docstring)."""
        now = self._clock()
        st = self.engine.restore(ctx.state, now)
        ctx.state[UNINTERRUPTIBLE_KEY] = False
        self._save(ctx, st)
        text = message_text(ctx.user_message)
        intent = None
        if intents := self.engine.needs_intent(st, text, now):
            intent = await self._classify(st, ctx, text, intents)
        decision = self.engine.start_turn(st, text, now, intent)
        self._save(ctx, st)
        if decision is not None:
            for say in await self._announce(ctx, st, decision):
                yield say
        turn_msgs: list[dict[str, Any]] = []  # this turn's tool exchange, sent back each round
        fallback: tuple[str, str] | None = None  # (stage, tool) when noting the facts failed
        if (sheet := self.engine.sheets.get(st.stage)) is not None:
            entered = decision is not None and decision.changed
            if entered and (question := self._question_first(ctx, st, sheet, text)):
                # said at once; the note keeps what else the caller gave ("a check-up") for
                # the call after the turn (``ctx.after``), ~1.2 s of a 1.5B model's time on
                # 2 cores that the caller no longer waits through, and that a quick reply to
                # the question does not find still running (a barge-in)
                ctx.after = functools.partial(self._note, ctx, st, sheet, text)
                yield question.strip()
                return
            says, answered = await self._collect(ctx, st, sheet, text, entered, turn_msgs)
            for say in says:
                yield say
            if answered is None:
                fallback = (st.stage, sheet.tool_name)
            elif answered:
                return
        rounds = self.playbook.globals.max_tool_rounds
        for round_no in range(rounds + 1):
            final = round_no == rounds
            plan = self.engine.plan(st, first_round=round_no == 0)
            extra = [fallback[1]] if fallback and fallback[0] == st.stage else []
            history = llm_messages(ctx.history[st.history_from:], self._history)
            turn = [ctx.user_message, *turn_msgs]
            request = self.requests.answer(plan, history, turn, extra, self._clock(), final=final)
            if turn_msgs and not request.tools:  # the answer to a result, with no tool to
                # call: told so, a small model spoke instead of writing the result as JSON
                request.messages.append({"role": "system", "content": FINAL_NUDGE})
            last: list[StreamEvent] = []
            spoken: list[str] = []
            async with contextlib.aclosing(stream_text(
                    self._router, request, self._timeout_s, on_done=last.append)) as pieces:
                async for piece in pieces:
                    spoken.append(piece)
                    yield piece
            for event in last:
                ctx.usage = (ctx.usage or Usage()) + event.usage
            calls = tuple(last[0].tool_calls) if last else ()
            if not calls or final:
                return
            if (sheet := self.engine.sheets.get(st.stage)) is not None:  # the caller's details
                today = self.requests.today(self._clock())
                calls = tuple(dataclasses.replace(c, arguments=sheet.ground(
                    self.playbook.tools[c.name], c.arguments, st.facts, text, today))
                    if c.name in self.playbook.tools else c for c in calls)
            says, answered = await self._tool_round(ctx, st, calls, "".join(spoken),
                                                    turn_msgs)
            for say in says:
                yield say
            if answered:
                return

    async def _tool_round(self, ctx: TurnContext, st: PlaybookState,
                          calls: tuple[ToolCall, ...], spoken: str,
                          turn_msgs: list[dict[str, Any]]) -> tuple[list[str], bool]:
        """Run one round's calls concurrently; record them; return the texts to say, and
        whether they answer the turn: every call's tool gives its answer (``answer_from``)."""
        calls = tuple(ToolCall(id=f"call_{uuid.uuid4().hex[:16]}", name=c.name or "",
                               arguments=c.arguments) for c in calls[:MAX_CALLS_PER_ROUND])
        if ctx.confirmed is not None and any(c.name != TRANSITION_TOOL for c in calls):
            await ctx.confirmed()  # a speculative answer's tools act once the turn is over
        # The spoken preamble (if any) is part of the turn's final assistant entry, not this
        # one. "" rather than None: chat templates of local models concatenate the content.
        assistant = {"role": "assistant", "content": "",
                     "tool_calls": [{"id": c.id, "type": "function",
                                     "function": {"name": c.name, "arguments": c.arguments}}
                                    for c in calls]}
        ctx.pending.append(assistant)
        turn_msgs.append({**assistant, "content": spoken})
        decisions: list[Decision] = []
        limit = asyncio.Semaphore(self.playbook.globals.max_parallel_tools)

        async def one(call: ToolCall) -> ToolOutcome:
            async with limit:
                return await self._run_call(ctx, st, call, decisions)

        batch = asyncio.gather(*(one(c) for c in calls))
        try:
            outcomes = await asyncio.shield(batch)
        except asyncio.CancelledError:
            # barge-in: let the calls finish (each is bounded), record them, then stop
            outcomes = await batch
            self._record(ctx, outcomes, turn_msgs)
            for decision in decisions:  # the stage did change: tell the client, say nothing
                await self._announce(ctx, st, decision, mid_turn=True)
            raise
        self._record(ctx, outcomes, turn_msgs)
        says: list[str] = []
        for decision in decisions:
            says.extend(await self._announce(ctx, st, decision, mid_turn=True))
        pairs = [(o, self.playbook.tools.get(o.name)) for o in outcomes]
        answers = [a for o, t in pairs if (a := answer_of(o, t))]
        answered = bool(outcomes) and len(answers) == len(outcomes)
        st.offer = {k: v for o, t in pairs for k, v in offer_of(o, t).items()} if answered else {}
        st.offer_said = " ".join(answers) if st.offer else ""
        self._save(ctx, st)
        return ([*says, *answers], True) if answered else (says, False)

    async def _collect(self, ctx: TurnContext, st: PlaybookState, sheet: FactSheet, text: str,
                       entered: bool, turn_msgs: list[dict[str, Any]],
                       ) -> tuple[list[str], bool | None]:
        """Slot filling in a stage with ``collect`` (``collect.py``): note the caller's facts,
        then call the tool, or ask for the next missing fact, or leave the answer to the
        model. Returns the texts to say and whether they answer the turn; None when the note
        failed (an endpoint without structured output): the model then gets the tool itself,
        as in a stage without ``collect``."""
        if (found := await self._note(ctx, st, sheet, text)) is None:
            return [], None
        noted, reopened = found
        if not sheet.missing(st.facts):
            args = json.dumps({k: st.facts[k] for k in sheet.properties if k in st.facts},
                              sort_keys=True)
            if args == st.called and not (noted and sheet.tool.answer_from):
                return [], False  # done with these values: the model talks it over (a tool
                # that answers itself answers again when they are said again: "Have passed 10")
            if sheet.collect.confirm is not None and not st.confirmed:
                today = self.requests.today(self._clock())
                if args != st.read_back or _cut_short(ctx, st, sheet, today):
                    st.read_back = args  # new or changed details, or not heard: said back
                    self._save(ctx, st)
                    return [read_back(sheet, st.facts, today)], True
                if not confirms(text):  # to spell, what to change, or the model answers
                    return ([said], True) if (said := not_yet(sheet, noted, text)) else ([], False)
                st.confirmed = True
            st.called = args
            call = ToolCall(id="", name=sheet.tool_name, arguments=args)
            return await self._tool_round(ctx, st, (call,), "", turn_msgs)
        question = sheet.question(st.facts)
        if question and (noted or entered or reopened):
            return [question.strip()], True
        return [], False

    async def _note(self, ctx: TurnContext, st: PlaybookState, sheet: FactSheet, text: str,
                    ) -> tuple[dict[str, Any], list[str]] | None:
        """Note the facts the caller's ``text`` gives and keep those that hold up; returns
        them and the facts a declined offer reopened (None: the request failed)."""
        asked = last_asked(ctx, st)
        now = self._clock()
        try:
            result = await self._router.complete(self.requests.note(st, sheet, asked, text, now))
        except LLMError as exc:
            log.warning("noting the caller's facts failed: %s", exc)
            return None
        ctx.usage = (ctx.usage or Usage()) + result.usage
        offer = standing_offer(st.offer, st.offer_said, asked)
        noted = sheet.accept(result.text, text, offer, self.requests.today(now))
        reopened = [k for k in declined(offer, st.facts, text, st.data) if k not in noted]
        for name in reopened:  # asked for again: the value that failed is not wanted
            st.facts.pop(name, None)
        st.facts.update({k: v for k, v in noted.items() if k not in st.data})  # data is fixed
        self._save(ctx, st)
        return noted, reopened

    def _question_first(self, ctx: TurnContext, st: PlaybookState, sheet: FactSheet,
                        text: str) -> str | None:
        """The question a turn that enters a collecting stage asks whatever its note finds
        (``FactSheet.question_before_note``), when no offer stands that a yes would take."""
        if standing_offer(st.offer, st.offer_said, last_asked(ctx, st)) is not None:
            return None
        return sheet.question_before_note(st.facts, text)

    async def _run_call(self, ctx: TurnContext, st: PlaybookState, call: ToolCall,
                        decisions: list[Decision]) -> ToolOutcome:
        await ctx.emit(ToolCallStart(name=call.name, call_id=call.id,
                                     arguments=_loose_args(call.arguments)))
        if call.name == TRANSITION_TOOL:
            outcome = self._transition_call(st, call, decisions)
        else:
            outcome = await self._tools.run(call.name, call.arguments, call_id=call.id,
                                            data=st.data, said=_said(ctx))
            if outcome.ok and call.name in self.playbook.tools and \
                    not self.playbook.tools[call.name].interruptible:
                ctx.state[UNINTERRUPTIBLE_KEY] = True
            if call.name in self.playbook.tools:
                decision = self.engine.after_tool(
                    st, ToolEvent(call.name, outcome.ok, outcome.arguments, outcome.result),
                    self._clock())
                if decision is not None:
                    decisions.append(decision)
        await ctx.emit(ToolCallEnd(call_id=call.id, result=outcome.result if outcome.ok else None,
                                   error=outcome.error, duration_ms=outcome.duration_ms))
        return outcome

    def _transition_call(self, st: PlaybookState, call: ToolCall,
                         decisions: list[Decision]) -> ToolOutcome:
        started = time.monotonic()
        outcome = ToolOutcome(name=call.name, call_id=call.id, arguments={}, ok=False)
        try:
            args = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            args = None
        target = args.get("to") if isinstance(args, dict) else None
        if isinstance(args, dict):
            outcome.arguments = args
        decision = self.engine.llm_decision(st, target, self._clock()) \
            if isinstance(target, str) else None
        if decision is None:
            options = (self.engine.plan(st, first_round=False).transition_tool or {}) \
                .get("function", {}).get("parameters", {}).get("properties", {}) \
                .get("to", {}).get("enum", [])
            outcome.error = (f"cannot move to {target!r} now; allowed: "
                             f"{', '.join(options) or 'none'}")
        else:
            decisions.append(decision)
            outcome.ok = True
            outcome.result = {"stage": decision.to_stage}
        outcome.duration_ms = round((time.monotonic() - started) * 1000, 3)
        return outcome

    def _record(self, ctx: TurnContext, outcomes: list[ToolOutcome],
                turn_msgs: list[dict[str, Any]]) -> None:
        for outcome in outcomes:
            message = {"role": "tool", "tool_call_id": outcome.call_id,
                       "content": outcome.content()}
            ctx.pending.append(message)
            turn_msgs.append(message)

    async def _announce(self, ctx: TurnContext, st: PlaybookState, decision: Decision,
                        mid_turn: bool = False) -> list[str]:
        """Emit ``stage-change`` for a fired transition; return its texts to speak. Cleared
        history keeps the user's message, or after a tool (``mid_turn``) starts at the answer
        (with the tool's result JSON in view, the 1.5B read it out on the next turn)."""
        if decision.clear_history:
            st.history_from = len(ctx.history) + mid_turn * (len(ctx.pending) + 1)
        self._save(ctx, st)
        if decision.changed:
            await ctx.emit(StageChange(from_=decision.from_stage, to=decision.to_stage,
                                       reason=decision.reason))
        return [say.strip() + " " for say in decision.say if say.strip()]

    async def _classify(self, st: PlaybookState, ctx: TurnContext, text: str,
                        intents: list[str]) -> str | None:
        """Ask the LLM which intent the user turn expresses (``none`` when no intent fits):
        a structured answer (an endpoint that refuses one is asked by a forced call instead:
        llm/openai_compat.py), or, as a scripted reply may give it, a call's arguments."""
        try:
            result = await self._router.complete(self.requests.intent(st, text, intents))
        except LLMError as exc:
            log.warning("intent classification failed: %s", exc)
            return None
        ctx.usage = (ctx.usage or Usage()) + result.usage
        for args in [*(_loose_args(c.arguments) for c in result.tool_calls),
                     _loose_args(result.text)]:
            if args.get("intent") in intents:
                return args["intent"]
        answer = result.text.lower()
        found = [n for n in intents if n.lower() in answer]
        return found[0] if len(found) == 1 else None

    def _save(self, ctx: TurnContext, st: PlaybookState) -> None:
        ctx.state.update(st.to_dict())


def _loose_args(raw: str) -> dict[str, Any]:
    """The arguments as an object for display (``{}`` when the model produced garbage)."""
    try:
        value = json.loads(raw or "{}")
    except (json.JSONDecodeError, TypeError):
        return {"_raw": str(raw)[:500]}
    return value if isinstance(value, dict) else {"_raw": value}


def _cut_short(ctx: TurnContext, st: PlaybookState, sheet: FactSheet,
               today: date | None) -> bool:
    """The agent's last words were interrupted before the caller heard every detail."""
    last = agent_last(ctx, st)
    return bool(last.get("interrupted")) and \
        not heard_whole(sheet, st.facts, today, str(last["content"]))


def _said(ctx: TurnContext) -> str:
    """Everything the caller said in this conversation (for ``x-from-caller`` arguments)."""
    return " ".join(message_text(m) for m in [*ctx.history, ctx.user_message]
                    if m.get("role") == "user")
