"""``StageRequests``: the LLM requests a playbook's turn makes, built in one place.

A turn (``responder.py``) may ask the model three things, each a ``ChatRequest``:

- ``intent``: which of the stage's intents the caller's words express (a structured answer);
- ``note``: the details a caller gave in a stage with ``collect`` (structured output,
  ``collect.FactSheet``);
- ``answer``: the stage's answer, streamed, with its tools.

Each starts with what is the same for every session of a stage (its instructions, tools and
examples), so that prefix is computed once and kept (``warm``: server/warm.py); what a session
knows follows it. ``first`` is the request a turn would start with, for the model to read
while the caller still speaks (``PlaybookResponder.prefill``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from ..llm import ChatRequest, message_text
from ..pipeline.turn import DEFAULT_WINDOW, HistoryWindow, TurnContext, llm_messages
from .collect import FactSheet
from .engine import Engine, PlaybookState, StagePlan
from .schema import Playbook
from .tools import ToolRunner

__all__ = ["INTENT_NAME", "StageRequests", "agent_last", "last_asked", "today_line"]

INTENT_NAME = "intent"  # the structured answer's schema name


@dataclass(frozen=True)
class StageRequests:
    """The requests of one playbook (``responder.PlaybookResponder`` holds one).
    ``defaults``: (model, temperature, max_tokens) where the playbook and the stage leave them
    unset; ``timeout_s``: each request's deadline; ``history``: how much history an answer
    sends."""

    playbook: Playbook
    engine: Engine
    tools: ToolRunner
    history: HistoryWindow = DEFAULT_WINDOW
    timeout_s: float | None = 30.0
    defaults: tuple[str | None, float | None, int | None] = (None, None, None)

    def answer(self, plan: StagePlan, history: list[dict[str, Any]],
               turn: list[dict[str, Any]], extra_tools: list[str], now: float, *,
               final: bool) -> ChatRequest:
        """The stage's answer: its instructions and tools (the same for every session: the
        prompt's prefix), the ``history``, what this session knows (``plan.context``), then
        this ``turn`` (the user's message, the tool exchange so far); no tools when ``final``."""
        specs = [] if final else self.tools.specs([*plan.tools, *extra_tools])
        if plan.transition_tool is not None and not final:
            specs.append(plan.transition_tool)
        context = "\n\n".join(part for part in (
            plan.context, today_line(now) if self.playbook.globals.today else "") if part)
        messages = [*([{"role": "system", "content": plan.system_prompt}]
                      if plan.system_prompt else []), *history,
                    *([{"role": "system", "content": context}] if context else []), *turn]
        model, temperature, max_tokens = self.defaults
        return ChatRequest(messages=messages, model=plan.model or model,
                           temperature=temperature if plan.temperature is None
                           else plan.temperature,
                           max_tokens=plan.max_tokens or max_tokens, tools=specs or None,
                           tool_choice=plan.tool_choice if specs else None,
                           timeout_s=self.timeout_s)

    def intent(self, st: PlaybookState, text: str, intents: list[str]) -> ChatRequest:
        """Which of ``intents`` the user's ``text`` expresses (or "none"): a structured answer
        ``{"intent": ...}``. It was a forced tool call: the embedded model reads the answer's
        opening (4 tokens) where a call's is ~16 after the words, and its prompt carries no
        tool schema. On the support playbook's lines (``bench/intent_check.py``: the 1.5B
        model on 2 cores, 33 lines twice) the answer took two questions for a ticket until
        "none" was described too; with it, both were right 62 of 66 times, with the same
        misses, the answer in 607 ms at p50 against the call's 756 (docs/performance.md)."""
        described = "\n".join([*(f"- {n}: {self.playbook.intents.get(n, '')}" for n in intents),
                               "- none: none of these (a question, anything else)"])
        prompt = (self.playbook.globals.intent_prompt or
                  "Classify the user's last message. Answer with the intent that fits, or "
                  "'none'.") + "\nIntents:\n" + described
        parameters = {"type": "object", "properties": {
            "intent": {"type": "string", "enum": [*intents, "none"]}},
            "required": ["intent"], "additionalProperties": False}
        return ChatRequest(messages=[{"role": "system", "content": prompt},
                                     {"role": "user", "content": text}],
                           model=self.engine.plan(st, first_round=True).model,
                           temperature=0.0, max_tokens=40, timeout_s=self.timeout_s,
                           response_format={"type": "json_schema", "json_schema": {
                               "name": INTENT_NAME, "schema": parameters}})

    def note(self, st: PlaybookState, sheet: FactSheet, asked: str | None, text: str,
             now: float) -> ChatRequest:
        """The details the caller's ``text`` gives, in answer to ``asked``."""
        messages = sheet.note_messages(asked, text)
        if self.playbook.globals.today:  # after the stage's fixed prompt: it stays cached
            messages.insert(1, {"role": "system", "content": today_line(now)})
        return ChatRequest(messages=messages,
                           model=self.engine.plan(st, first_round=True).model,
                           temperature=0.0, max_tokens=48 + 24 * len(sheet.properties),
                           response_format=sheet.note_format(
                               {**sheet.given(text, self.today(now)), **dict.fromkeys(st.data)}),
                           timeout_s=self.timeout_s)

    def today(self, now: float) -> date | None:
        """Today's date at ``now``, for the days a caller names, when the playbook gives it
        (``globals.today``)."""
        return datetime.fromtimestamp(now).astimezone().date() \
            if self.playbook.globals.today else None

    def first(self, ctx: TurnContext, now: float) -> list[ChatRequest]:
        """The requests worth reading ahead for the turn of ``ctx``, their user message the
        words heard so far. The turn's first: the note in a stage with ``collect``, else the
        stage's answer, in the stage a transition the words fire leads to (a keyword: "...
        book a table"). Where an intent is asked first, the requests that may follow it: the
        notes of the stages with ``collect`` its intents lead to (the support playbook's "I
        restarted the router and it is still slow." -> ``ticket``), and the answers of those
        whose transition clears the history (-> ``closing``: the stage's prompt, what the
        session knows, the words); the intent check itself reads little more than the words
        after its saved prompt, and such a note the agent's question too. Not an answer with
        the history: read while the caller spoke, that took the cores from the pause (the
        thirty-sixth session, docs/performance.md).

        Why: a typed booking note read ~20-35 tokens after the stage's saved prompt, 0.4-0.6 s
        of its 1.3-1.7 s (1.5B model, 2 cores); the agent's question and the message's opening,
        about half of them, are known before the caller's first word. The ticket's note after
        the intent check read ~60 tokens, ~40 of them the agent's last answer."""
        text = message_text(ctx.user_message)
        st = self.engine.restore(ctx.state, now)
        if intents := self.engine.needs_intent(st, text, now):
            return [request for intent in intents
                    if (request := self._led_to(ctx, text, now, intent, short=True))]
        request = self._led_to(ctx, text, now, None, short=False)
        return [request] if request is not None else []

    def _led_to(self, ctx: TurnContext, text: str, now: float, intent: str | None, *,
                short: bool) -> ChatRequest | None:
        """The first request of the stage the turn leads to, given ``intent`` (on a copy of
        the session's state); ``short``: only a note, or an answer without history."""
        st = self.engine.restore(ctx.state, now)
        decision = self.engine.start_turn(st, text, now, intent)
        if decision is not None and decision.clear_history:
            st.history_from = len(ctx.history)
        if (sheet := self.engine.sheets.get(st.stage)) is not None:
            return self.note(st, sheet, last_asked(ctx, st), text, now)
        if short and not (decision is not None and decision.clear_history):
            return None
        history = llm_messages(ctx.history[st.history_from:], self.history)
        return self.answer(self.engine.plan(st, first_round=True), history,
                           [ctx.user_message], [], now, final=False)

    def warm(self, now: float) -> list[ChatRequest]:
        """A request of each kind a stage makes (intent, facts, answer), with a user's "Hello."
        as the turn: their prompts start as a call's will, so a model that computes them ahead
        (``LLMRouter.warm``, server/warm.py) answers a stage's first turn as quickly as its
        later ones. The first stage comes first; a request two stages make alike (the same
        intents) is listed once."""
        pb = self.playbook
        hello = "Hello."
        out: list[ChatRequest] = []
        for name in sorted(pb.stages, key=lambda n: n != pb.initial_stage):
            st = dataclasses.replace(self.engine.initial_state(now), stage=name)
            kinds = []
            if intents := self.engine.needs_intent(st):
                kinds.append(self.intent(st, hello, intents))
            if (sheet := self.engine.sheets.get(name)) is not None:
                kinds.append(self.note(st, sheet, None, hello, now))
            kinds.append(self.answer(self.engine.plan(st, first_round=True), [],
                                     [{"role": "user", "content": hello}], [], now,
                                     final=False))
            out += [request for request in kinds if request not in out]
        return out


def last_asked(ctx: TurnContext, st: PlaybookState) -> str | None:
    """The agent's last words in the playbook's view of the history (what the caller
    answers)."""
    said = agent_last(ctx, st)
    return str(said["content"]) if said else None


def agent_last(ctx: TurnContext, st: PlaybookState) -> dict[str, Any]:
    """The agent's last message with words in the playbook's view of the history ({} when
    none): its ``content`` and whether it was ``interrupted``."""
    return next((m for m in reversed(ctx.history[st.history_from:])
                 if m.get("role") == "assistant" and m.get("content")), {})


def today_line(now: float) -> str:
    """The date line of ``globals.today``, after the history and the stage's fixed prompt (so
    those stay cached). Only the day: with the time and the next week's dates as well, the 1.5B
    model lost its voice (it echoed its last question: "And your name, please?"); the days a
    caller names are worked out in code (``heard.day_named``)."""
    return f"Today is {datetime.fromtimestamp(now).astimezone():%A %Y-%m-%d}."
