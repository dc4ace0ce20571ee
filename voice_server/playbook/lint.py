"""Graph lint for a loaded playbook: things that are valid but probably mistakes.

Warnings, not errors (``playbook validate --strict`` turns them into a failure): stages that no
transition can reach from the initial stage, tools that no stage offers, intents that no
transition uses, and a ``collect`` argument that is required but has no ``ask`` question and is
never ``set`` by a transition or a stage's ``on_enter`` (the model then words the question).
"""

from __future__ import annotations

from .collect import sheets
from .schema import Playbook

__all__ = ["lint"]


def lint(pb: Playbook) -> list[str]:
    warnings: list[str] = []
    reachable = {pb.initial_stage}
    frontier = [pb.initial_stage]
    while frontier:
        stage = frontier.pop()
        for tr in pb.transitions:
            if tr.to is not None and tr.to not in reachable and \
                    (stage in tr.sources or "*" in tr.sources):
                reachable.add(tr.to)
                frontier.append(tr.to)
    for stage in pb.stages:
        if stage not in reachable:
            warnings.append(f"stage {stage!r} cannot be reached from the initial stage "
                            f"{pb.initial_stage!r}")
    offered = set(pb.globals.tools) | {t for s in pb.stages.values() for t in s.tools} | \
        {s.collect.tool for s in pb.stages.values() if s.collect is not None}  # the engine calls it
    for tool in pb.tools:
        if tool not in offered:
            warnings.append(f"tool {tool!r} is not offered in any stage (add it to a stage's or "
                            f"the globals' tools)")
    given = {k for tr in pb.transitions for k in tr.set} | {
        k for s in pb.stages.values() if s.on_enter is not None for k in s.on_enter.set}
    for name, sheet in sheets(pb.stages, pb.tools).items():
        for arg in sheet.required:
            if arg not in sheet.collect.ask and arg not in given:
                warnings.append(f"stage {name!r} collects {arg!r} without an `ask` question "
                                f"(the model words it)")
    used = {tr.when.intent for tr in pb.transitions if tr.when.intent}
    for intent in pb.intents:
        if intent not in used:
            warnings.append(f"intent {intent!r} is declared but no transition uses it")
    return warnings
