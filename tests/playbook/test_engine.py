"""Engine: table-driven checks of every condition and action, priorities, `*`, limits, plans."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from voice_server.playbook import Engine, PlaybookState, ToolEvent, load_playbook_text

PLAYBOOK = textwrap.dedent("""\
    id: t
    initial_stage: a
    globals: {system_prompt: G, tools: [g], turn_taking: {end_silence_ms: 700, barge_in: true},
              llm: {model: big, temperature: 0.5}}
    intents: {buy: wants to buy, quit: wants to leave}
    stages:
      a: {system_prompt: A, tools: [t1], max_turns: 3, timeout_s: 60,
          on_enter: {say: Back in A., set: {visited_a: true}}}
      b: {system_prompt: B, tools: [t1, t2], tool_choice: required,
          turn_taking: {end_silence_ms: 1200}, llm: {temperature: 0.1, max_tokens: 50}}
      c: {tool_choice: {name: t2}, tools: [t2], on_enter: {say: Welcome to C.}}
      d: {}
    transitions:
      - {from: a, to: b, when: {keyword: [book, "a table"]}}
      - {from: a, to: c, when: {keyword: [book]}, priority: 5}
      - {from: a, to: d, when: {intent: buy}}
      - {from: a, to: d, when: {max_turns: true}, say: Too many turns.}
      - {from: b, to: a, when: {timeout_s: 30}, clear_history: true}
      - {from: b, to: c, when: {tool_called: t1}}
      - {from: c, to: d, when: {tool_result: {tool: t2, ok: true, match: {status: ok, a.b: 1}}},
         set: {ref: "${result.ref}", arg: "${args.x}", fixed: 7}}
      - {from: c, when: {tool_result: {tool: t2, ok: false}}, set: {failures: 1}}
      - {from: "*", to: a, when: {llm_decision: the user wants to restart}}
      - {from: [b, c], to: d, when: {intent: quit}, priority: 9, reason: user_quit}
    tools:
      g: {handler: {python: "json:dumps"}}
      t1: {handler: {python: "json:dumps"}}
      t2: {handler: {python: "json:dumps"}}
    """)

NOW = 1000.0


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load_playbook_text(PLAYBOOK))


def state(stage: str = "a", **kw: Any) -> PlaybookState:
    return PlaybookState(playbook="t", stage=stage, entered_at=NOW, **kw)


# (description, stage, state fields, text, seconds later, intent, (to, reason, say) or None)
TURN_CASES = [
    ("no condition holds", "a", {}, "hello", 1, None, None),
    ("keyword, priority wins over file order", "a", {}, "I want to BOOK now", 1, None,
     ("c", "keyword_match", ("Welcome to C.",))),
    ("multi-word keyword", "a", {}, "is a table free?", 1, None, ("b", "keyword_match", ())),
    ("keyword must be a whole word", "a", {}, "my bookshelf", 1, None, None),
    ("intent", "a", {}, "hmm", 1, "buy", ("d", "intent", ())),
    ("intent of another stage ignored", "a", {}, "hmm", 1, "quit", None),
    ("max_turns true uses the stage value", "a", {"stage_turns": 3}, "x", 1, None,
     ("d", "max_turns", ("Too many turns.",))),
    ("max_turns not reached", "a", {"stage_turns": 2}, "x", 1, None, None),
    ("timeout", "b", {}, "x", 30, None, ("a", "timeout", ("Back in A.",))),
    ("timeout not reached", "b", {}, "x", 29.9, None, None),
    ("explicit reason and priority over timeout", "b", {}, "x", 31, "quit",
     ("d", "user_quit", ())),
    ("list of sources", "c", {}, "x", 1, "quit", ("d", "user_quit", ())),
]


@pytest.mark.parametrize(("stage", "fields", "text", "later", "intent", "expected"),
                         [c[1:] for c in TURN_CASES], ids=[c[0] for c in TURN_CASES])
def test_turn_start(engine: Engine, stage: str, fields: dict[str, Any], text: str, later: float,
                    intent: str | None, expected: tuple[str, str, tuple[str, ...]] | None) -> None:
    """Turn-start conditions fire as the table says; the turn is counted in the new stage."""
    st = state(stage, **fields)
    decision = engine.start_turn(st, text, NOW + later, intent)
    if expected is None:
        assert decision is None
        assert (st.stage, st.stage_turns, st.turns) == (stage, fields.get("stage_turns", 0) + 1, 1)
        return
    assert decision is not None
    assert (decision.to_stage, decision.reason, decision.say) == expected
    assert decision.from_stage == stage and decision.changed
    assert (st.stage, st.stage_turns, st.entered_at) == (expected[0], 1, NOW + later)


def test_clear_history_and_on_enter_set(engine: Engine) -> None:
    """clear_history is reported; on_enter.set stores data."""
    st = state("b")
    decision = engine.start_turn(st, "x", NOW + 40)
    assert decision is not None and decision.clear_history
    assert st.data == {"visited_a": True}


# (description, stage, event, expected stage, expected data)
TOOL_CASES = [
    ("tool_called", "b", ToolEvent("t1", ok=False), "c", {}),
    ("other tool", "b", ToolEvent("t2", ok=True), "b", {}),
    ("tool_result match with set templates", "c",
     ToolEvent("t2", ok=True, arguments={"x": "X"}, result={"status": "ok", "a": {"b": 1},
                                                            "ref": "R1"}),
     "d", {"ref": "R1", "arg": "X", "fixed": 7}),
    ("tool_result value differs", "c",
     ToolEvent("t2", ok=True, result={"status": "busy", "a": {"b": 1}}), "c", {}),
    ("tool_result nested key missing", "c", ToolEvent("t2", ok=True, result={"status": "ok"}),
     "c", {}),
    ("tool_result ok false: action-only transition", "c", ToolEvent("t2", ok=False), "c",
     {"failures": 1}),
]


@pytest.mark.parametrize(("stage", "event", "to", "data"), [c[1:] for c in TOOL_CASES],
                         ids=[c[0] for c in TOOL_CASES])
def test_after_tool(engine: Engine, stage: str, event: ToolEvent, to: str,
                    data: dict[str, Any]) -> None:
    """Tool conditions fire as the table says; `set` stores (templated) data."""
    st = state(stage)
    decision = engine.after_tool(st, event, NOW)
    assert st.stage == to
    assert st.data == data
    if to == stage and not data:
        assert decision is None
    else:
        assert decision is not None and decision.changed == (to != stage)


def test_llm_decision(engine: Engine) -> None:
    """The built-in transition tool lists the targets; an allowed target fires, others do not."""
    st = state("b")
    tool = engine.plan(st, first_round=True).transition_tool
    assert tool is not None
    assert tool["function"]["parameters"]["properties"]["to"]["enum"] == ["a"]
    assert "the user wants to restart" in tool["function"]["description"]
    assert engine.llm_decision(st, "d", NOW) is None
    decision = engine.llm_decision(st, "a", NOW)
    assert decision is not None and (decision.reason, st.stage) == ("llm_decision", "a")


def test_star_does_not_reenter_its_target(engine: Engine) -> None:
    """`from: "*"` skips the stage it leads to (no transition tool in stage a)."""
    assert engine.plan(state("a"), first_round=True).transition_tool is None
    assert engine.llm_decision(state("a"), "a", NOW) is None


def test_plan(engine: Engine) -> None:
    """Prompts join globals and stage (plus known data); tool choice forcing is first-round only;
    LLM options merge stage over globals."""
    st = state("b", data={"name": "Ada"})
    first = engine.plan(st, first_round=True)
    assert first.system_prompt == "G\n\nB"  # the same for every session: cached
    assert first.context == 'Known so far: {"name": "Ada"}'
    assert first.tools == ("g", "t1", "t2")
    assert (first.tool_choice, engine.plan(st, first_round=False).tool_choice) == \
        ("required", "auto")
    assert (first.model, first.temperature, first.max_tokens) == ("big", 0.1, 50)
    forced = engine.plan(state("c"), first_round=True).tool_choice
    assert forced == {"type": "function", "function": {"name": "t2"}}
    assert engine.plan(state("c"), first_round=False).tool_choice == "auto"


def test_turn_taking(engine: Engine) -> None:
    """Stage turn-taking overrides the globals field by field."""
    assert engine.turn_taking(state("a")) == {"end_silence_ms": 700, "barge_in": True}
    assert engine.turn_taking(state("b")) == {"end_silence_ms": 1200, "barge_in": True}


def test_state_roundtrip_and_restore(engine: Engine) -> None:
    """State survives a dict round trip; foreign or broken state starts afresh."""
    st = state("c", stage_turns=2, turns=5, data={"k": [1]}, history_from=4)
    assert engine.restore(st.to_dict(), NOW) == st
    fresh = engine.initial_state(NOW)
    assert fresh.stage == "a" and fresh.data == {"visited_a": True}
    assert engine.restore({"playbook": "other", "stage": "c"}, NOW) == fresh
    assert engine.restore({"playbook": "t", "stage": "gone"}, NOW) == fresh
    assert engine.restore({"playbook": "t", "stage": "c", "turns": "x"}, NOW) == fresh
    assert engine.restore(None, NOW) == fresh


def test_timed_out(engine: Engine) -> None:
    """`timed_out` lets an idle timer ask whether a timeout transition is due."""
    assert not engine.timed_out(state("b"), NOW + 10)
    assert engine.timed_out(state("b"), NOW + 30)
    assert not engine.timed_out(state("d"), NOW + 10_000)


def test_needs_intent(engine: Engine) -> None:
    """Only stages with intent transitions ask for classification."""
    assert engine.needs_intent(state("a")) == ["buy"]
    assert engine.needs_intent(state("b")) == ["quit"]
    assert engine.needs_intent(state("d")) == []


def test_no_intent_is_asked_for_when_an_earlier_transition_fires_without_one(
        engine: Engine) -> None:
    """A keyword checked before the intent settles the turn: no classifying request. One
    checked after it (or an intent of higher priority) does not."""
    assert engine.needs_intent(state("a"), "I want to book", NOW) == []
    assert engine.needs_intent(state("a"), "hmm", NOW) == ["buy"]
    assert engine.needs_intent(state("a", stage_turns=3), "hmm", NOW) == ["buy"]  # after it
    assert engine.needs_intent(state("b"), "hmm", NOW + 31) == ["quit"]  # priority 9 first
