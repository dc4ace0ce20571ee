"""The playbook engine, pure: state and events in, new state and decisions out. No I/O, no clock.

Events:
- ``start_turn(state, text, now, intent)``: a user turn begins; ``timeout_s``, ``max_turns``,
  ``keyword`` and ``intent`` transitions are checked (``needs_intent`` says whether the caller
  must classify the turn first);
- ``after_tool(state, ToolEvent)``: a tool call finished; ``tool_called`` and ``tool_result``;
- ``llm_decision(state, to)``: the model called the built-in ``playbook_transition`` tool.

Among the transitions that apply to an event, the highest ``priority`` wins, ties keep file
order; one transition fires per event. ``from: "*"`` matches every stage except the target
itself (so "start over" does not re-enter the stage it leads to). State is a JSON-friendly dict,
stored in the session and restored on ``reconnect``; times are wall-clock seconds given by the
caller.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .collect import sheets
from .schema import PLACEHOLDER, Playbook, Transition

__all__ = [
    "TRANSITION_TOOL",
    "Decision",
    "Engine",
    "PlaybookState",
    "StagePlan",
    "ToolEvent",
]

TRANSITION_TOOL = "playbook_transition"
TURN_START_KINDS = ("timeout_s", "max_turns", "keyword", "intent")
REASONS = {"keyword": "keyword_match", "intent": "intent", "tool_called": "tool_called",
           "tool_result": "tool_result", "llm_decision": "llm_decision",
           "max_turns": "max_turns", "timeout_s": "timeout"}


@dataclass
class PlaybookState:
    """Session-persisted playbook state (``Session.state``)."""

    playbook: str
    stage: str
    stage_turns: int = 0  # user turns begun in the current stage
    turns: int = 0  # user turns in the whole conversation
    entered_at: float = 0.0  # wall-clock time the stage was entered
    data: dict[str, Any] = field(default_factory=dict)  # collected by `set` actions
    history_from: int = 0  # history index where the playbook's view starts (clear_history)
    facts: dict[str, Any] = field(default_factory=dict)  # collected by the stage's `collect`
    called: str = ""  # the arguments of the engine's last `collect` call (not repeated)
    offer: dict[str, Any] = field(default_factory=dict)  # values a tool's answer offered
    offer_said: str = ""  # that answer (the offer stands while it is the agent's last words)
    read_back: str = ""  # the arguments last read back to the caller (``collect.confirm``)
    confirmed: bool = False  # the caller said yes to them (read back once per stage)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ToolEvent:
    name: str
    ok: bool
    arguments: dict[str, Any] = field(default_factory=dict)
    result: Any = None


@dataclass(frozen=True)
class Decision:
    """A transition that fired; ``changed`` is False for action-only transitions."""

    from_stage: str
    to_stage: str
    reason: str
    transition: int | None  # index in ``playbook.transitions``
    say: tuple[str, ...] = ()
    clear_history: bool = False

    @property
    def changed(self) -> bool:
        return self.from_stage != self.to_stage


@dataclass(frozen=True)
class StagePlan:
    """What the next LLM request of a turn uses in the current stage. ``system_prompt`` is the
    same on every turn of the stage, for every session (with the tools it is the prompt's
    prefix, which the model's cache keeps); ``context`` holds what this session knows, sent
    after the history."""

    system_prompt: str
    context: str
    tools: tuple[str, ...]  # playbook tool names
    transition_tool: dict[str, Any] | None  # the built-in tool spec, when it applies
    tool_choice: str | dict[str, Any] | None
    model: str | None
    temperature: float | None
    max_tokens: int | None
    interruptible: bool = True


class Engine:
    """Decisions for one playbook; holds no per-session state."""

    def __init__(self, playbook: Playbook) -> None:
        self.playbook = playbook
        self.sheets = sheets(playbook.stages, playbook.tools)  # stages with `collect`
        self._order = sorted(range(len(playbook.transitions)),
                             key=lambda i: (-playbook.transitions[i].priority, i))

    # -- state ----------------------------------------------------------------------------
    def initial_state(self, now: float) -> PlaybookState:
        return PlaybookState(playbook=self.playbook.id, stage=self.playbook.initial_stage,
                             entered_at=now,
                             data=dict(self._on_enter_set(self.playbook.initial_stage)))

    def restore(self, raw: dict[str, Any] | None, now: float) -> PlaybookState:
        """State from a session dict; a missing, foreign or stale one starts afresh."""
        if not raw or raw.get("playbook") != self.playbook.id or \
                raw.get("stage") not in self.playbook.stages:
            return self.initial_state(now)
        try:
            return PlaybookState(
                playbook=self.playbook.id, stage=raw["stage"],
                stage_turns=int(raw.get("stage_turns", 0)), turns=int(raw.get("turns", 0)),
                entered_at=float(raw.get("entered_at", now)), data=dict(raw.get("data") or {}),
                history_from=int(raw.get("history_from", 0)),
                facts=dict(raw.get("facts") or {}), called=str(raw.get("called") or ""),
                offer=dict(raw.get("offer") or {}), offer_said=str(raw.get("offer_said") or ""),
                read_back=str(raw.get("read_back") or ""),
                confirmed=bool(raw.get("confirmed", False)))
        except (TypeError, ValueError):
            return self.initial_state(now)

    # -- events ---------------------------------------------------------------------------
    def needs_intent(self, state: PlaybookState, text: str | None = None,
                     now: float = 0.0) -> list[str]:
        """Intent names the current stage's transitions wait for (classify before start_turn).
        Given the turn's ``text``: none when a transition checked before them fires without
        one (a keyword, a timeout), so that turn spends no request on classifying."""
        intents: list[str] = []
        for _, tr in self._candidates(state, TURN_START_KINDS):
            if tr.when.intent is not None:
                intents.append(tr.when.intent)
            elif text is not None and not intents and \
                    self._turn_condition(state, tr, text, now, None):
                return []
        return list(dict.fromkeys(intents))

    def start_turn(self, state: PlaybookState, text: str, now: float,
                   intent: str | None = None) -> Decision | None:
        """Count the user turn (mutates ``state``) and fire at most one turn-start transition."""
        state.turns += 1
        decision = None
        for i, tr in self._candidates(state, TURN_START_KINDS):
            if self._turn_condition(state, tr, text, now, intent):
                decision = self._fire(state, i, tr, now, {})
                break
        state.stage_turns += 1
        return decision

    def after_tool(self, state: PlaybookState, event: ToolEvent, now: float) -> Decision | None:
        for i, tr in self._candidates(state, ("tool_called", "tool_result")):
            cond = tr.when
            if cond.tool_called is not None and cond.tool_called != event.name:
                continue
            if cond.tool_result is not None and not _result_matches(cond.tool_result, event):
                continue
            return self._fire(state, i, tr, now, {"args": event.arguments,
                                                  "result": event.result})
        return None

    def llm_decision(self, state: PlaybookState, to: str, now: float) -> Decision | None:
        for i, tr in self._candidates(state, ("llm_decision",)):
            if tr.to == to:
                return self._fire(state, i, tr, now, {})
        return None

    def timed_out(self, state: PlaybookState, now: float) -> bool:
        """Whether a ``timeout_s`` transition of the stage is due (for an idle timer)."""
        return any(self._turn_condition(state, tr, "", now, None)
                   for _, tr in self._candidates(state, ("timeout_s",)))

    # -- plans ----------------------------------------------------------------------------
    def plan(self, state: PlaybookState, *, first_round: bool) -> StagePlan:
        pb = self.playbook
        stage = pb.stages[state.stage]
        prompt = "\n\n".join(p for p in (pb.globals.system_prompt.strip(),
                                         stage.system_prompt.strip()) if p)
        tools = tuple(pb.stage_tools(state.stage))
        sheet = self.sheets.get(state.stage)
        known = state.data if sheet is not None else {**state.facts, **state.data}
        context = "Known so far: " + json.dumps(known, ensure_ascii=False, default=str) \
            if known else ""
        if sheet is not None:  # the engine calls the collected tool itself
            tools = tuple(t for t in tools if t != sheet.tool_name)
            context += ("\n\n" if context else "") + sheet.prompt_lines(state.facts)
            if state.read_back and not state.confirmed:
                context += (". They were read back to the caller: nothing is done until the "
                            "caller says they are right")
        transition_tool = self._transition_tool(state)
        choice: str | dict[str, Any] | None = stage.tool_choice
        if isinstance(choice, dict):
            choice = ({"type": "function", "function": {"name": choice["name"]}}
                      if first_round else "auto")
        elif choice == "required" and not first_round:
            choice = "auto"
        if not tools and transition_tool is None:
            choice = None
        opts = {k: v for src in (pb.globals.llm, stage.llm) if src is not None
                for k, v in src.model_dump(exclude_none=True).items()}
        return StagePlan(system_prompt=prompt, context=context, tools=tools,
                         transition_tool=transition_tool,
                         tool_choice=choice, model=opts.get("model"),
                         temperature=opts.get("temperature"), max_tokens=opts.get("max_tokens"))

    def turn_taking(self, state: PlaybookState) -> dict[str, Any]:
        """The stage's turn-taking overrides merged over the playbook's (unset fields omitted)."""
        stage = self.playbook.stages.get(state.stage)
        out: dict[str, Any] = {}
        for src in (self.playbook.globals.turn_taking, stage.turn_taking if stage else None):
            if src is not None:
                out.update(src.model_dump(exclude_none=True))
        return out

    # -- internals ------------------------------------------------------------------------
    def _candidates(self, state: PlaybookState,
                    kinds: tuple[str, ...]) -> list[tuple[int, Transition]]:
        out = []
        for i in self._order:
            tr = self.playbook.transitions[i]
            if tr.when.kind not in kinds:
                continue
            if state.stage in tr.sources or ("*" in tr.sources and tr.to != state.stage):
                out.append((i, tr))
        return out

    def _turn_condition(self, state: PlaybookState, tr: Transition, text: str, now: float,
                        intent: str | None) -> bool:
        cond, stage = tr.when, self.playbook.stages[state.stage]
        if cond.keyword is not None:
            low = text.lower()
            return any(re.search(rf"(?<!\w){re.escape(k.lower())}(?!\w)", low)
                       for k in cond.keyword)
        if cond.intent is not None:
            return intent == cond.intent
        if cond.max_turns is not None:
            limit = stage.max_turns if cond.max_turns is True else cond.max_turns
            return limit is not None and state.stage_turns >= limit
        if cond.timeout_s is not None:
            limit = stage.timeout_s if cond.timeout_s is True else cond.timeout_s
            return limit is not None and now - state.entered_at >= limit
        return False

    def _on_enter_set(self, stage: str) -> dict[str, Any]:
        on_enter = self.playbook.stages[stage].on_enter
        return dict(on_enter.set) if on_enter else {}

    def _fire(self, state: PlaybookState, index: int, tr: Transition, now: float,
              scope: dict[str, Any]) -> Decision:
        source = state.stage
        target = tr.to or source
        state.data.update({k: _resolve(v, scope) for k, v in tr.set.items()})
        if tr.clear_history:
            state.facts, state.read_back, state.confirmed = {}, "", False
        say = [tr.say] if tr.say else []
        if tr.to is not None:
            state.stage, state.stage_turns, state.entered_at = target, 0, now
            state.called, state.offer, state.offer_said = "", {}, ""
            state.read_back, state.confirmed = "", False
            if target != source and target in self.sheets:  # a fresh collection, from
                state.facts = {name: state.data[name]  # what the session already knows
                               for name in self.sheets[target].properties if name in state.data}
            on_enter = self.playbook.stages[target].on_enter
            if on_enter is not None:
                state.data.update(on_enter.set)
                if on_enter.say:
                    say.append(on_enter.say)
        return Decision(from_stage=source, to_stage=target,
                        reason=tr.reason or REASONS[tr.when.kind], transition=index,
                        say=tuple(say), clear_history=tr.clear_history)

    def _transition_tool(self, state: PlaybookState) -> dict[str, Any] | None:
        options: dict[str, list[str]] = {}
        for _, tr in self._candidates(state, ("llm_decision",)):
            if tr.to is not None:
                options.setdefault(tr.to, []).append(tr.when.llm_decision or "")
        if not options:
            return None
        lines = "\n".join(f"- {to}: {'; or '.join(whens)}" for to, whens in options.items())
        return {"type": "function", "function": {
            "name": TRANSITION_TOOL,
            "description": "Move the conversation to another stage. Call it only when one of "
                           "these holds:\n" + lines,
            "parameters": {"type": "object", "properties": {
                "to": {"type": "string", "enum": list(options)},
                "reason": {"type": "string"}}, "required": ["to"]}}}


def _lookup(value: Any, dotted: str) -> tuple[bool, Any]:
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _result_matches(cond: Any, event: ToolEvent) -> bool:
    if cond.tool != event.name or (cond.ok is not None and cond.ok != event.ok):
        return False
    for key, expected in cond.match.items():
        found, value = _lookup(event.result, key)
        if not found or value != expected:
            return False
    return True


def _resolve(value: Any, scope: dict[str, Any]) -> Any:
    """``"${result.booking_id}"`` / ``"${args.time}"`` take the tool's values; others stay."""
    whole = PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    if whole is not None:
        found, got = _lookup(scope, whole[1])
        return got if found else None
    return value
